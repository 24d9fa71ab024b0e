"""GPU Portal scheduling engine: pure planning over a frozen snapshot of the fleet.

No Django, no I/O, no clock, no randomness: `plan(snapshot, now=..., policy=...)` is a function
of its arguments.  See docs/engine.md for the design.

Import each name from the module that defines it.
"""

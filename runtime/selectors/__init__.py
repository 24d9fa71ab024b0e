"""Reads of the runtime app: what sync saw of an attempt's pods (`observed`)."""

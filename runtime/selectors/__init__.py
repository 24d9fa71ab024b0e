"""Reads of the runtime app: the live work each pass acts on (`workloads`)."""

"""gpuctl: the GPU Portal's command line, a client of its REST API (no Django inside)."""

__version__ = "0.1.0"

"""`python -m gpuctl` runs the same command line as the installed `gpuctl` script."""

from gpuctl.cli import main

main()

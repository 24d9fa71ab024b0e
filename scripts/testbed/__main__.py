"""`make testbed`: build the binaries if needed, start the control plane, print the kubeconfig,
and keep it running until Ctrl-C.

    python -m scripts.testbed            # build (cached) + start with the demo GPU nodes
    python -m scripts.testbed --no-build # fail instead of building
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from scripts.testbed.cluster import K8S_VERSION, Testbed, TestbedError, build, missing_binaries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.testbed")
    parser.add_argument("--no-build", action="store_true", help="do not build missing binaries")
    parser.add_argument("--workdir", type=Path, help="keep state here instead of a temp dir")
    args = parser.parse_args(argv)
    try:
        if args.no_build:
            if missing_binaries():
                print(f"missing binaries: {', '.join(missing_binaries())}", file=sys.stderr)
                return 2
            binaries = None
        else:
            binaries = build(K8S_VERSION)
        bed = Testbed(args.workdir, binaries=binaries)
        print(f"starting the test bed (Kubernetes {K8S_VERSION}) in {bed.workdir} ...", flush=True)
        bed.start()
    except TestbedError as exc:
        print(f"testbed: {exc}", file=sys.stderr)
        return 1
    print(
        f"ready in {bed.startup_seconds['total']:.1f}s\n"
        f"  API server:         {bed.server}\n"
        f"  admin kubeconfig:   {bed.admin_kubeconfig}\n"
        f"  portal kubeconfig:  {bed.portal_kubeconfig}  (least-privilege ClusterRole)\n"
        f"  logs:               {bed.workdir / 'logs'}\n"
        f"  try: KUBECONFIG={bed.admin_kubeconfig} CLUSTER_BACKEND=kubernetes make run\n"
        "Ctrl-C stops everything.",
        flush=True,
    )
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        while not stop:
            for name, component in bed.components.items():
                if not component.alive():
                    print(f"{name} exited:\n{component.tail()}", file=sys.stderr)
                    stop = True
            time.sleep(1)
    finally:
        bed.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

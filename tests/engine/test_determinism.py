"""Plans do not depend on hash randomisation (no set/dict-order dependence across processes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import hashlib
from tests.engine.builders import fleet, node, req, alloc, whole_claims
from scheduling.engine.planner import plan
from scheduling.engine.types import Priority
nodes = [node(f"n{i}", gpus=4) for i in range(6)] + [
    node(f"v{i}", pool="vgpu", gpus=2) for i in range(3)] + [
    node(f"m{i}", pool="mig", gpus=2) for i in range(3)]
running = [alloc(f"run{i}", whole_claims(f"n{i}", [0, 1]), priority=0, preemptible=True,
                 max_runtime_seconds=100.0 * (i + 1)) for i in range(6)]
flavors = ["gpu", "v10", "v20", "m1", "m3"]
pending = [req(f"r{i:03d}", flavors[i % 5], team=f"t{i % 3}", gpu_count=1 + (i % 3 == 0) * 3
               if i % 5 == 0 else 1, priority=i % 5, submitted_at=float(i % 7),
               max_runtime_seconds=50.0 * (1 + i % 9)) for i in range(120)]
p = plan(fleet(*nodes, allocations=running, pending=pending), now=0.0)
print(hashlib.sha256(repr(p).encode()).hexdigest())
"""


def _digest(seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_same_plan_under_different_hash_seeds() -> None:
    assert _digest("1") == _digest("2") == _digest("12345")

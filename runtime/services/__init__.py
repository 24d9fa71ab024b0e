"""Writes of the runtime app, by sub-domain.

- `execution`: launch and sync, and which cluster serves an attempt;
- `inventory`: the nodes and GPUs each cluster reports, matched onto pools;
- `monitoring`: GPU activity sampling;
- `reclaim`, `verdicts`, `outcomes`: how live work ends;
- `project_data`, `propagation`, `relocation`: what the cluster must learn after a decision;
- `kueue_admission`, `kueue_policy`: Kueue-mode clusters;
- `inspection`: logs and events, read by the worker for the web tier;
- `clusters`: a pass run cluster by cluster, each with its own failures.
"""

"""Reads of the scheduling app, by sub-domain.

- `quotas`: units committed per quota key, quota rows and standings, an approval's impact;
- `catalog`: the tiers and flavors a project may use, and what a pool's nodes can hold;
- `approvals`: a team's leads, the approval inbox, open asks and deferred approvals;
- `fleet`: every pool's overview, and the drill-down to its nodes and GPUs;
- `governance`: the reclamation rules that apply to a request;
- `history`: recent queue waits and how actual runtimes compared with the declared ones;
- `activity`: which clusters have no GPU activity signal, and what idle reclaim may judge;
- `clusters`, `connect`, `fleet_nodes`, `foreign_usage`, `pilots`, `scheduler_modes` and
  `snapshot` (what the scheduling cycle reads), imported by their module name.

Import each name from the module that defines it.
"""

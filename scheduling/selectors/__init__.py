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

The reads that other apps and the views share are re-exported here, so
`scheduling.selectors.quota_standing` keeps naming them, as for every app's `selectors`.
"""

from scheduling.selectors.approvals import (
    DEFERRED_APPROVAL_ACTION,
    OpenAsk,
    approval_inbox,
    deferred_approvals,
    deferring_lead,
    open_asks,
    team_leads,
)
from scheduling.selectors.catalog import (
    PoolCapacity,
    flavors_for_project,
    pool_capacity,
    tier_allowed_for_project,
)
from scheduling.selectors.fleet import PoolOverview, fleet_overview
from scheduling.selectors.governance import GovernanceRules, governance_rules
from scheduling.selectors.history import (
    RuntimeHistory,
    ratio_bands_by_request,
    recent_admission_waits,
    runtime_history,
)
from scheduling.selectors.quotas import (
    ProjectSplit,
    QuotaImpact,
    QuotaStanding,
    QuotaUsage,
    TeamQuotaRow,
    committed_units,
    flavor_unit,
    queue_quota_impacts,
    quota_impact,
    quota_rows,
    quota_standing,
    quota_usage,
)

__all__ = [
    "DEFERRED_APPROVAL_ACTION",
    "GovernanceRules",
    "OpenAsk",
    "PoolCapacity",
    "PoolOverview",
    "ProjectSplit",
    "QuotaImpact",
    "QuotaStanding",
    "QuotaUsage",
    "RuntimeHistory",
    "TeamQuotaRow",
    "approval_inbox",
    "flavor_unit",
    "committed_units",
    "deferred_approvals",
    "deferring_lead",
    "fleet_overview",
    "flavors_for_project",
    "governance_rules",
    "open_asks",
    "pool_capacity",
    "quota_impact",
    "quota_rows",
    "quota_standing",
    "quota_usage",
    "queue_quota_impacts",
    "ratio_bands_by_request",
    "recent_admission_waits",
    "runtime_history",
    "team_leads",
    "tier_allowed_for_project",
]

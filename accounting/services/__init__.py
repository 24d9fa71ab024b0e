"""Writes of the accounting app, by sub-domain.

- `metering`: the meter — what allocations ran, cut at days, months and repricings, added to
  the ledger and its rollups;
- `ingest`: bulk usage that does not come from the meter (`manage.py import_usage`);
- `prices`: the price list (platform admins);
- `budgets`: budgets, their alerts, and the policy that shapes submissions over budget;
- `statements`: closing a team's month into a frozen statement.

The public services are re-exported here, so `accounting.services.meter_usage` is the name
other apps and the views use, as for every app's `services`.
"""

from accounting.services.budgets import (
    check_budget_burn,
    create_budget,
    delete_budget,
    update_budget,
)
from accounting.services.ingest import (
    IMPORT_BATCH_ROWS,
    USAGE_COLUMNS,
    import_usage_file,
    ingest_usage,
    ingest_usage_csv,
)
from accounting.services.metering import meter_allocation, meter_usage
from accounting.services.prices import create_price, delete_price, update_price
from accounting.services.statements import close_statement

__all__ = [
    "IMPORT_BATCH_ROWS",
    "USAGE_COLUMNS",
    "check_budget_burn",
    "close_statement",
    "create_budget",
    "create_price",
    "delete_budget",
    "delete_price",
    "import_usage_file",
    "ingest_usage",
    "ingest_usage_csv",
    "meter_allocation",
    "meter_usage",
    "update_budget",
    "update_price",
]

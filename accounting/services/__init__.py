"""Writes of the accounting app, by sub-domain.

- `metering`: the meter — what allocations ran, cut at days, months and repricings, added to
  the ledger and its rollups;
- `ingest`: bulk usage that does not come from the meter (`manage.py import_usage`);
- `prices`: the price list (platform admins);
- `budgets`: budgets, their alerts, and the policy that shapes submissions over budget;
- `statements`: closing a team's month into a frozen statement.

Import each name from the module that defines it.
"""

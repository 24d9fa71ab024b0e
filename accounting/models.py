"""Usage ledger, prices and budgets (arrive with the accounting issue)."""

"""Usage metering, prices, chargeback, budgets, statements and the sharing report.

Writes are in `accounting.services`, reads in `accounting.selectors`, both packages split by
sub-domain. A few modules stay at the app's root because they touch no database and import
nothing of the app above its models: `periods` (billing days and months), `exports` (CSV and
XLSX with formulas neutralised), `rightsizing` and `sharing_report` (pure computations over
plain data). `demo` seeds the demo's prices.
"""

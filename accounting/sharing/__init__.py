"""Does sharing pay? The sharing report of each GPU pool over a period (docs/sharing-report.md).

`report` computes it from plain data (pure), `selectors` reads that data from the database,
`views` and `api` show it to finance and platform admins.
"""

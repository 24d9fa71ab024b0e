"""Reads of the accounting app, by sub-domain: `usage` (prices, usage rows and chargeback),
`budgets` (this month's burn), `efficiency` (allocated vs active GPU-hours, right-sizing
hints), `reports` (the report pages), `dashboards` (the role home pages), `inbox` (the lead's
approvals and asks, priced) and `sharing` (the sharing report's data).
"""

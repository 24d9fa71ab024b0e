"""HTML pages of the scheduling app, by sub-domain.

- `requests`: the request form, my requests, a request's page and its actions, approvals;
- `oversight`: team quotas and their project split, the audit log;
- `fleet`: the fleet overview and its drill-down to pools and nodes;
- `project_data`: a project's workspace, home volumes and secrets;
- `replay`: the policy replay page.

`scheduling/urls.py` imports each module by name.
"""

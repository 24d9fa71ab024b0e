"""Writes of the scheduling app, by sub-domain.

- `requests`: a request's life — submit, approve, reject, cancel, expire, resume;
- `quotas`: team quotas and their split over projects;
- `governance`: the lead's oversight of running work — asks, idle exemptions, longer runtimes;
- `templates`: saved request templates, and submitting a finished request again;
- `project_data`: a project's workspace, home volumes, secrets and the team's storage quota;
- `clusters`: the clusters the portal runs work on, and their sealed kubeconfigs.

Import each name from the module that defines it.
"""

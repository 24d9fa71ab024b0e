"""Writes of the scheduling app, by sub-domain.

- `requests`: a request's life — submit, approve, reject, cancel, expire, resume;
- `quotas`: team quotas and their split over projects;
- `governance`: the lead's oversight of running work — asks, idle exemptions, longer runtimes;
- `templates`: saved request templates, and submitting a finished request again;
- `project_data`: a project's workspace, home volumes, secrets and the team's storage quota;
- `clusters`: the clusters the portal runs work on, and their sealed kubeconfigs.

The public services are re-exported here, so `scheduling.services.submit_gpu_request` is the
name other apps and the views use, as for every app's `services`.
"""

from scheduling.services.clusters import (
    delete_cluster,
    register_cluster,
    update_cluster,
)
from scheduling.services.governance import ask_lead, extend_runtime, grant_idle_exemption
from scheduling.services.project_data import (
    create_project_secret,
    create_workspace,
    delete_project_secret,
    delete_storage_quota,
    delete_workspace,
    set_storage_quota,
    update_project_secret,
    update_workspace,
)
from scheduling.services.quotas import delete_quota, set_quota
from scheduling.services.requests import (
    SubmissionAdjustment,
    SubmissionOutlook,
    approve_deferred_requests,
    approve_gpu_request,
    approve_when_quota_frees,
    cancel_gpu_request,
    expire_stale_approvals,
    gpu_request_submitting,
    preview_submission,
    reject_gpu_request,
    resume_gpu_request,
    submit_gpu_request,
)
from scheduling.services.templates import (
    create_request_template,
    delete_request_template,
    request_body_of,
    resubmit_gpu_request,
    save_request_as_template,
    template_body_of,
    update_request_template,
)

__all__ = [
    "SubmissionAdjustment",
    "SubmissionOutlook",
    "approve_deferred_requests",
    "approve_gpu_request",
    "approve_when_quota_frees",
    "ask_lead",
    "cancel_gpu_request",
    "create_project_secret",
    "create_request_template",
    "create_workspace",
    "delete_cluster",
    "delete_project_secret",
    "delete_storage_quota",
    "delete_workspace",
    "delete_request_template",
    "delete_quota",
    "expire_stale_approvals",
    "extend_runtime",
    "gpu_request_submitting",
    "grant_idle_exemption",
    "preview_submission",
    "register_cluster",
    "reject_gpu_request",
    "request_body_of",
    "resubmit_gpu_request",
    "resume_gpu_request",
    "save_request_as_template",
    "set_quota",
    "set_storage_quota",
    "submit_gpu_request",
    "template_body_of",
    "update_cluster",
    "update_project_secret",
    "update_request_template",
    "update_workspace",
]

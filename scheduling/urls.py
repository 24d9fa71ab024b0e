from __future__ import annotations

from django.urls import path

from scheduling.views import fleet, oversight, project_data, replay, requests

urlpatterns = [
    path("requests/", requests.request_list, name="gpu-requests-page"),
    path("requests/new/", requests.request_new, name="gpu-request-new"),
    path("requests/new/flavors/", requests.request_form_flavors, name="gpu-request-form-flavors"),
    path("requests/new/what-if/", requests.request_what_if, name="gpu-request-what-if-page"),
    path("requests/<int:pk>/", requests.request_detail, name="gpu-request-page"),
    path("requests/<int:pk>/cancel/", requests.request_cancel, name="gpu-request-cancel-page"),
    path(
        "requests/<int:pk>/status/",
        requests.request_status_watch,
        name="gpu-request-status-page",
    ),
    path(
        "requests/<int:pk>/keep-alive/",
        requests.request_keep_alive,
        name="gpu-request-keep-alive-page",
    ),
    path(
        "requests/<int:pk>/resubmit/", requests.request_resubmit, name="gpu-request-resubmit-page"
    ),
    path(
        "requests/<int:pk>/save-template/",
        requests.request_save_template,
        name="gpu-request-save-template-page",
    ),
    path(
        "requests/<int:pk>/govern/<str:action>/",
        requests.request_govern,
        name="gpu-request-govern-page",
    ),
    path("approvals/bulk/", requests.approvals_bulk, name="approvals-bulk"),
    path(
        "approvals/<int:pk>/<str:decision>/",
        requests.approval_decide,
        name="approval-decide",
    ),
    path("quotas/", oversight.quotas, name="quotas-page"),
    path(
        "quotas/<int:project_id>/<int:flavor_id>/",
        oversight.project_quota_set,
        name="project-quota-set",
    ),
    path("audit/", oversight.audit_log, name="audit-page"),
    path("projects/<int:pk>/data/", project_data.project_data, name="project-data-page"),
    path("fleet/", fleet.fleet, name="fleet-page"),
    path("fleet/pools/<slug:slug>/", fleet.fleet_pool, name="fleet-pool-page"),
    path("fleet/nodes/<int:pk>/", fleet.fleet_node, name="fleet-node-page"),
    path("fleet/replay/", replay.policy_replay, name="policy-replay-page"),
]

from __future__ import annotations

from django.urls import path

from scheduling import project_data_views, replay_views, views

urlpatterns = [
    path("requests/", views.request_list, name="gpu-requests-page"),
    path("requests/new/", views.request_new, name="gpu-request-new"),
    path("requests/new/flavors/", views.request_form_flavors, name="gpu-request-form-flavors"),
    path("requests/new/what-if/", views.request_what_if, name="gpu-request-what-if-page"),
    path("requests/<int:pk>/", views.request_detail, name="gpu-request-page"),
    path("requests/<int:pk>/cancel/", views.request_cancel, name="gpu-request-cancel-page"),
    path("requests/<int:pk>/resubmit/", views.request_resubmit, name="gpu-request-resubmit-page"),
    path(
        "requests/<int:pk>/save-template/",
        views.request_save_template,
        name="gpu-request-save-template-page",
    ),
    path(
        "requests/<int:pk>/govern/<str:action>/",
        views.request_govern,
        name="gpu-request-govern-page",
    ),
    path("approvals/bulk/", views.approvals_bulk, name="approvals-bulk"),
    path(
        "approvals/<int:pk>/<str:decision>/",
        views.approval_decide,
        name="approval-decide",
    ),
    path("quotas/", views.quotas, name="quotas-page"),
    path(
        "quotas/<int:project_id>/<int:flavor_id>/",
        views.project_quota_set,
        name="project-quota-set",
    ),
    path("audit/", views.audit_log, name="audit-page"),
    path("projects/<int:pk>/data/", project_data_views.project_data, name="project-data-page"),
    path("fleet/", views.fleet, name="fleet-page"),
    path("fleet/pools/<slug:slug>/", views.fleet_pool, name="fleet-pool-page"),
    path("fleet/nodes/<int:pk>/", views.fleet_node, name="fleet-node-page"),
    path("fleet/replay/", replay_views.policy_replay, name="policy-replay-page"),
]

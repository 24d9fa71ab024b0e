from __future__ import annotations

from django.urls import path

from accounting import views

urlpatterns = [
    path("requests/new/estimate/", views.request_estimate, name="request-estimate"),
    path(
        "requests/<int:pk>/efficiency/",
        views.request_efficiency_fragment,
        name="gpu-request-efficiency-page",
    ),
    path("approvals/", views.approvals, name="approvals-page"),
    path("reports/", views.reports, name="reports-page"),
    path("reports/sharing/", views.sharing_report_page, name="sharing-report-page"),
    path(
        "reports/sharing/pilots/",
        views.sharing_pilots_fragment,
        name="sharing-pilots-fragment",
    ),
    path("reports/statements/", views.statements_page, name="statements-page"),
    path("reports/statements/<int:pk>/", views.statement_detail, name="statement-page"),
    path("budgets/", views.budgets_page, name="budgets-page"),
    path("budgets/new/", views.budget_create, name="budget-create"),
    path("budgets/<int:pk>/edit/", views.budget_edit, name="budget-edit"),
    path("budgets/<int:pk>/delete/", views.budget_delete, name="budget-delete"),
]

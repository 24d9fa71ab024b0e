from __future__ import annotations

from django.urls import path
from rest_framework.routers import SimpleRouter

from accounting.api import views
from accounting.api.sharing import SharingReportView

router = SimpleRouter()
router.register("budgets", views.BudgetViewSet, basename="budget")
router.register("prices", views.PriceViewSet, basename="price")
router.register("resource-prices", views.ResourcePriceViewSet, basename="resource-price")
router.register("statements", views.StatementViewSet, basename="statement")

urlpatterns = [
    path("usage/", views.UsageView.as_view(), name="usage"),
    path("chargeback/", views.ChargebackView.as_view(), name="chargeback"),
    path("efficiency/", views.EfficiencyView.as_view(), name="efficiency"),
    path("reports/sharing/", SharingReportView.as_view(), name="sharing-report"),
    path(
        "requests/<int:pk>/efficiency/",
        views.RequestEfficiencyView.as_view(),
        name="gpu-request-efficiency",
    ),
    *router.urls,
]

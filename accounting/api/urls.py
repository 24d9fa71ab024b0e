from __future__ import annotations

from django.urls import path

from accounting.api import views

urlpatterns = [
    path("usage/", views.UsageView.as_view(), name="usage"),
    path("chargeback/", views.ChargebackView.as_view(), name="chargeback"),
]

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
]

from __future__ import annotations

from django.urls import path

from runtime.api import views

urlpatterns = [
    path("requests/<int:pk>/logs/", views.RequestLogsView.as_view(), name="gpu-request-logs"),
    path("requests/<int:pk>/events/", views.RequestEventsView.as_view(), name="gpu-request-events"),
]

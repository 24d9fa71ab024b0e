from __future__ import annotations

from django.urls import path

from accounting import views

urlpatterns = [
    path("requests/new/estimate/", views.request_estimate, name="request-estimate"),
]

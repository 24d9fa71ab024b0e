from __future__ import annotations

from django.urls import path

from runtime import views

urlpatterns = [
    path("auth/workloads/<int:pk>/", views.workload_auth, name="workload-auth"),
    path("connect/<int:pk>/", views.workload_connect, name="workload-connect"),
    path("requests/<int:pk>/inspect/", views.request_inspect, name="gpu-request-inspect-page"),
]

from __future__ import annotations

from django.urls import path
from rest_framework.routers import SimpleRouter

from scheduling.api import clusters, mig_plan, project_data, views

router = SimpleRouter()
router.register("tiers", views.TierViewSet, basename="tier")
router.register("clusters", clusters.ClusterViewSet, basename="cluster")
router.register("pools", views.NodePoolViewSet, basename="pool")
router.register("flavors", views.FlavorViewSet, basename="flavor")
router.register("approval-rules", views.ApprovalRuleViewSet, basename="approval-rule")
router.register("reclaim-policies", views.ReclaimPolicyViewSet, basename="reclaim-policy")
router.register("quotas", views.QuotaViewSet, basename="quota")
router.register("requests", views.GpuRequestViewSet, basename="gpu-request")
router.register("templates", views.RequestTemplateViewSet, basename="request-template")
router.register("storage-quotas", project_data.StorageQuotaViewSet, basename="storage-quota")
router.register("workspaces", project_data.WorkspaceViewSet, basename="workspace")
router.register("project-secrets", project_data.ProjectSecretViewSet, basename="project-secret")

urlpatterns = [
    *router.urls,
    path("mig-plan/", mig_plan.MigPlanView.as_view(), name="mig-plan"),
]

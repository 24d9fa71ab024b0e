from __future__ import annotations

from rest_framework.routers import SimpleRouter

from scheduling.api import views

router = SimpleRouter()
router.register("tiers", views.TierViewSet, basename="tier")
router.register("pools", views.NodePoolViewSet, basename="pool")
router.register("flavors", views.FlavorViewSet, basename="flavor")
router.register("approval-rules", views.ApprovalRuleViewSet, basename="approval-rule")
router.register("reclaim-policies", views.ReclaimPolicyViewSet, basename="reclaim-policy")
router.register("quotas", views.QuotaViewSet, basename="quota")
router.register("requests", views.GpuRequestViewSet, basename="gpu-request")
router.register("templates", views.RequestTemplateViewSet, basename="request-template")

urlpatterns = router.urls

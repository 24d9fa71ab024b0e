from __future__ import annotations

from rest_framework.routers import SimpleRouter

from scheduling.api import views

router = SimpleRouter()
router.register("pools", views.NodePoolViewSet, basename="pool")
router.register("flavors", views.FlavorViewSet, basename="flavor")
router.register("quotas", views.QuotaViewSet, basename="quota")
router.register("requests", views.GpuRequestViewSet, basename="gpu-request")

urlpatterns = router.urls

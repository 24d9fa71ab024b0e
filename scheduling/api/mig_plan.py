"""`GET /api/v1/mig-plan/`: a suggested MIG layout per node for the day's MIG demand (admins)."""

from __future__ import annotations

from django.http import Http404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduling.selectors.mig_plan import mig_plan, mig_plan_body
from tenants.models import scope_of


class MigPlanView(APIView):
    """Which `nvidia.com/mig.config` each MIG node would need to serve the MIG requests of the
    last day; a read-only suggestion (platform admins; everyone else gets 404)."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT, 404: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Response:
        if not scope_of(request.user).is_platform_admin:
            raise Http404
        return Response(mig_plan_body(mig_plan(now=timezone.now())))

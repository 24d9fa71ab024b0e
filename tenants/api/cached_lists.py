"""List pages answered from the shared cache while the data under them is unchanged.

The request list is the hottest endpoint: dashboards and scripts poll it, and each page of 50
cost a count, a page query and the rendering of 50 rows. A rendered JSON page is now kept per
caller and per exact URL, together with the version stamps (`tenants.data_versions`) of the
teams the caller can see; it is served while every stamp is unchanged, which one round trip to
the cache tells. Any write to those teams' data changes a stamp, so the next call recomputes.

The key names the caller (user id and roles), never a team alone: two users never share a page,
so what one may see cannot leak to another. Pages expire after LIST_CACHE_SECONDS regardless.
Only JSON answers are kept (the browsable API renders per request), and a cache outage means
computing every page, not an error.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.http import HttpResponse
from redis.exceptions import RedisError
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from tenants.data_versions import ALL_TEAMS, stamp_key, start_missing
from tenants.models import scope_of

logger = logging.getLogger(__name__)


class CachedListMixin:
    """`list()` served from the cache; `cached_list_kind` names the stamps the data changes."""

    cached_list_kind: str

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        seconds = int(settings.LIST_CACHE_SECONDS)
        if seconds <= 0 or not isinstance(request.accepted_renderer, JSONRenderer):
            return super().list(request, *args, **kwargs)  # type: ignore[misc]
        scope = scope_of(request.user)
        teams: list[int | str] = [ALL_TEAMS] if scope.sees_all_tenants else sorted(scope.team_ids)
        stamp_keys = [stamp_key(self.cached_list_kind, team) for team in teams]
        caller = (
            f"{scope.user_id}|{int(scope.is_platform_admin)}{int(scope.is_finance)}|"
            f"{sorted(scope.team_ids)}|{sorted(scope.lead_team_ids)}|"
            f"{request.build_absolute_uri()}"
        )
        page_key = (
            f"list-page:v1:{self.cached_list_kind}:{hashlib.sha256(caller.encode()).hexdigest()}"
        )
        try:
            found = cache.get_many([page_key, *stamp_keys])
        except RedisError:
            logger.warning("list cache unreachable; computing the page")
            return super().list(request, *args, **kwargs)  # type: ignore[misc]
        stamps = tuple(found.get(key) for key in stamp_keys)
        kept = found.get(page_key)
        if kept is not None and None not in stamps and kept[0] == stamps:
            return HttpResponse(kept[1], content_type=kept[2])

        response = super().list(request, *args, **kwargs)  # type: ignore[misc]
        if not isinstance(response, Response) or response.status_code != 200:
            return response
        content = request.accepted_renderer.render(
            response.data,
            request.accepted_media_type,
            self.get_renderer_context(),  # type: ignore[attr-defined]
        )
        content_type = request.accepted_renderer.media_type
        if None in stamps:
            start_missing(
                [key for key, stamp in zip(stamp_keys, stamps, strict=True) if stamp is None]
            )
        else:
            try:
                cache.set(page_key, (stamps, content, content_type), seconds)
            except RedisError:
                logger.warning("list cache unreachable; page not kept")
        return HttpResponse(content, content_type=content_type)

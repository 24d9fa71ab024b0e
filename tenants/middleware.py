"""Session limits, the audit of denied accesses and the answer to a cache outage, applied to
every request in one place."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.conf import settings
from django.contrib.auth import logout
from django.http import HttpRequest, HttpResponse
from redis.exceptions import RedisError

from tenants.api.errors import service_unavailable_response
from tenants.services.organisation import record_audit_event

logger = logging.getLogger(__name__)

SESSION_STARTED_KEY = "_portal_session_started_at"
SESSION_SEEN_KEY = "_portal_session_seen_at"
# Writing the last-seen time on every request would save the session every time; a minute's
# precision is plenty for a timeout counted in tens of minutes.
SEEN_PRECISION_SECONDS = 60


class SessionLimitsMiddleware:
    """End a session after SESSION_IDLE_TIMEOUT_SECONDS idle or SESSION_MAX_AGE_SECONDS in all.

    Django's own expiry is one sliding or one fixed age, never both; ASVS V7.3 asks for both.
    The session is flushed server-side, so a copied cookie dies with it.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            self._enforce_limits(request)
        return self.get_response(request)

    def _enforce_limits(self, request: HttpRequest) -> None:
        session = request.session
        now = int(time.time())
        started_at = session.setdefault(SESSION_STARTED_KEY, now)
        seen_at = session.get(SESSION_SEEN_KEY, now)
        idle = now - seen_at > settings.SESSION_IDLE_TIMEOUT_SECONDS
        too_old = now - started_at > settings.SESSION_MAX_AGE_SECONDS
        if idle or too_old:
            record_audit_event(
                actor=request.user,
                action="auth.session_expired",
                target=request.user,
                data={"reason": "idle" if idle else "max_age"},
            )
            logout(request)
            return
        if SESSION_SEEN_KEY not in session or now - seen_at >= SEEN_PRECISION_SECONDS:
            session[SESSION_SEEN_KEY] = now


class DeniedAccessAuditMiddleware:
    """Record every 403, and every 404 on an object route, answered to a signed-in caller.

    A 404 on `/requests/<pk>/` is what probing another team's ids looks like; a 404 on an
    unknown path is noise and is not kept. Anonymous callers are not recorded, so an
    unauthenticated flood cannot grow the audit table.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code not in (403, 404):
            return response
        user = getattr(request, "user", None)  # DRF copies the token's user onto the request
        if user is None or not user.is_authenticated:
            return response
        match = request.resolver_match
        kwargs = dict(match.kwargs) if match is not None else {}
        if response.status_code == 404 and not kwargs:
            return response
        record_audit_event(
            actor=user,
            action="access.denied" if response.status_code == 403 else "access.not_found",
            target=user,
            message=f"{request.method} {request.path}"[:500],
            data={
                "status": response.status_code,
                "route": match.url_name if match else "",
                "kwargs": {key: str(value)[:64] for key, value in kwargs.items()},
            },
        )
        return response


class CacheOutageMiddleware:
    """Answer 503 with Retry-After, not 500, when Redis is unreachable mid-request.

    Token and page reads go to the database; what needs Redis to decide — the rate limits on
    sign-in, creation and exports — raises, and the caller is told to retry rather than shown a
    server error.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, RedisError):
            return None
        logger.error("cache unreachable during %s %s: %s", request.method, request.path, exception)
        return service_unavailable_response(request)

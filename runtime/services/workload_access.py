"""The per-workload credential: how a browser signed in to the portal gets into one notebook
or service on its own host without ever sending it the portal's cookies (oauth2-proxy's and
JupyterHub's pattern; docs/security.md, "Workload origins").

1. `/connect/<id>/` on the portal checks the signed-in user may open the workload and mints a
   link token: signed, salted per workload, carrying the user, the workload and a nonce, valid
   WORKLOAD_LINK_SECONDS and good for one use.
2. The browser follows it to `<workload host>/_portal/callback?token=…`, which redeems it and
   sets a host-only cookie on that host: signed, salted per workload, valid
   WORKLOAD_COOKIE_SECONDS.
3. The Ingress's external auth (`/auth/workloads/<id>/`) checks that cookie on every call and
   checks again that its user may open the workload (a lead removed from the team is refused at
   the next call).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import signing
from django.core.cache import cache
from django.utils.crypto import constant_time_compare, salted_hmac

from scheduling.models import GpuRequest
from scheduling.selectors.connect import connectable_request

#: The path of every workload host that the portal answers (the Ingress routes it to the portal).
CALLBACK_PATH = "/_portal/callback"
COOKIE_NAME = "gpu_portal_workload"
_LINK_SALT = "gpu-portal.workload-link.{}"
_COOKIE_SALT = "gpu-portal.workload-cookie.{}"


@dataclass(frozen=True, slots=True)
class Access:
    """The answer of one check: 200 (let through), 401 (no valid credential: go to the portal)
    or 403 (a valid credential whose user may not open this workload)."""

    status: int
    user: Any = None
    gpu_request: GpuRequest | None = None


def _user_stamp(user: Any) -> str:
    """Changes when the user's password does (Django's session hash), ending their cookies."""
    return str(user.get_session_auth_hash())[:16]


def mint_link_token(*, user: Any, request_id: int) -> str:
    """The one-use token `/connect/` puts in the link to the workload host."""
    payload = {"u": user.pk, "w": request_id, "n": secrets.token_urlsafe(12)}
    return signing.dumps(payload, salt=_LINK_SALT.format(request_id))


def redeem_link_token(token: str, *, request_id: int) -> Access:
    """The access a link token gives, once: 401 when it is forged, expired, for another
    workload or used before; 403 when its user may not open the workload any more."""
    try:
        payload = signing.loads(
            token, salt=_LINK_SALT.format(request_id), max_age=settings.WORKLOAD_LINK_SECONDS
        )
    except signing.BadSignature:
        return Access(401)
    if not isinstance(payload, dict) or payload.get("w") != request_id:
        return Access(401)
    # One use: the first redeemer takes the nonce; a replay (from a log, a proxy) finds it taken.
    if not cache.add(f"workload-link:{payload.get('n')}", 1, settings.WORKLOAD_LINK_SECONDS + 5):
        return Access(401)
    return _access(payload.get("u"), request_id)


def cookie_value(*, user: Any, request_id: int) -> str:
    """The workload cookie of `user` for this one workload."""
    payload = {"u": user.pk, "w": request_id, "s": _user_stamp(user)}
    return signing.dumps(payload, salt=_COOKIE_SALT.format(request_id))


def check_cookie(value: str | None, *, request_id: int) -> Access:
    """The check behind every call to a workload: 401 without a valid cookie for this workload
    (a cookie of workload 5 does not open workload 6), 403 when its user may not open it now."""
    if not value:
        return Access(401)
    try:
        payload = signing.loads(
            value, salt=_COOKIE_SALT.format(request_id), max_age=settings.WORKLOAD_COOKIE_SECONDS
        )
    except signing.BadSignature:
        return Access(401)
    if not isinstance(payload, dict) or payload.get("w") != request_id:
        return Access(401)
    access = _access(payload.get("u"), request_id)
    if access.user is not None and not constant_time_compare(
        str(payload.get("s", "")), _user_stamp(access.user)
    ):
        return Access(401)
    return access


def _access(user_id: Any, request_id: int) -> Access:
    user = get_user_model().objects.filter(pk=user_id, is_active=True).first()
    if user is None:
        return Access(401)
    gpu_request = connectable_request(user, request_id)
    if gpu_request is None:
        return Access(403, user=user)
    return Access(200, user=user, gpu_request=gpu_request)


def set_workload_cookie(response: Any, *, user: Any, request_id: int) -> None:
    """Host-only (no Domain: only this workload's host gets it), HttpOnly, SameSite=Lax,
    Secure on https, for WORKLOAD_COOKIE_SECONDS."""
    response.set_cookie(
        COOKIE_NAME,
        cookie_value(user=user, request_id=request_id),
        max_age=settings.WORKLOAD_COOKIE_SECONDS,
        path="/",
        secure=settings.WORKLOAD_SCHEME == "https",
        httponly=True,
        samesite="Lax",
    )


def notebook_token(request_id: int) -> str:
    """The Jupyter token of a request's notebook: derived from SECRET_KEY and the request, so
    the worker (which writes it into the notebook's Secret) and the web (whose auth check hands
    it to the Ingress) agree without storing it; the same for every attempt."""
    return salted_hmac("gpu-portal.notebook-token", str(request_id)).hexdigest()

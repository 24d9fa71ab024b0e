"""API authentication: knox tokens, without knox's per-request sweep of the user's other tokens.

Kept apart from `tenants.api.base` because DRF imports authentication classes while its own
views module is loading; this module must not import DRF views.
"""

from __future__ import annotations

from django.utils import timezone
from knox.auth import TokenAuthentication
from knox.models import AuthToken


class PortalTokenAuthentication(TokenAuthentication):
    """knox token authentication with one query per request.

    knox loads every token of the user on every request to delete the expired ones; the
    `purge_expired_api_tokens` beat task does that for all users at once, so a request pays
    one indexed lookup (by token prefix, user joined) and the digest comparison. The token
    being presented is still refused, and deleted, once it has expired.
    """

    def _cleanup_token(self, auth_token: AuthToken) -> bool:
        if auth_token.expiry is not None and auth_token.expiry < timezone.now():
            auth_token.delete()
            return True
        return False

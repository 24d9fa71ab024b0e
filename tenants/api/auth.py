"""API authentication: knox tokens, verified once and then recalled from the shared cache.

Kept apart from `tenants.api.base` because DRF imports authentication classes while its own
views module is loading; this module must not import DRF views.
"""

from __future__ import annotations

import binascii
from typing import Any

from django.utils import timezone
from knox.auth import TokenAuthentication
from knox.crypto import hash_token
from knox.models import AuthToken
from rest_framework import exceptions

from tenants import credentials_cache
from tenants.models import scope_of


class PortalTokenAuthentication(TokenAuthentication):
    """knox token authentication without a query per request once a token is known.

    knox loads every token of the user on every request to delete the expired ones; the
    `purge_expired_api_tokens` beat task does that for all users at once. A token seen before
    is recalled from `tenants.credentials_cache` with its user and scope; a new one pays one
    indexed lookup (by token prefix, user joined), the digest comparison and the role query,
    and is then kept. The token being presented is still refused, and deleted, once expired.
    """

    def authenticate_credentials(self, token: bytes) -> tuple[Any, AuthToken]:
        try:
            digest = hash_token(token.decode("utf-8"))
        except (TypeError, UnicodeDecodeError, binascii.Error) as error:
            raise exceptions.AuthenticationFailed("Invalid token.") from error
        kept = credentials_cache.recall(digest)
        if kept is not None:
            return kept.user, kept
        user, auth_token = super().authenticate_credentials(token)
        scope_of(user)  # resolved now so that it is kept with the user
        credentials_cache.remember(auth_token)
        return user, auth_token

    def _cleanup_token(self, auth_token: AuthToken) -> bool:
        if auth_token.expiry is not None and auth_token.expiry < timezone.now():
            auth_token.delete()
            return True
        return False

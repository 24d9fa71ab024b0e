"""Single sign-on: mozilla-django-oidc's backend, with accounts by `preferred_username` and
memberships that follow the provider's groups (`tenants.services.identity`)."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.functional import cached_property
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from tenants.services.identity import (
    GroupGrant,
    groups_from_claim,
    parse_group_map,
    save_user_from_claims,
    sync_memberships_from_groups,
)

logger = logging.getLogger(__name__)


class PortalOIDCBackend(OIDCAuthenticationBackend):
    """Signs people in through the identity provider (OIDC code flow, signed ID token)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.groups_claim = self.get_settings("OIDC_GROUPS_CLAIM", "groups")

    @cached_property
    def group_map(self) -> dict[str, GroupGrant]:
        """Read when someone signs in through the provider, so that a map that does not read
        fails single sign-on (naming the entry) but not password sign-in, which loads this too."""
        return parse_group_map(self.get_settings("OIDC_GROUP_MAP", ""))

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> Any:
        """A token that fails verification (signature, algorithm, nonce) is a failed sign-in,
        audited as one, rather than a 400 page."""
        try:
            return super().authenticate(request, **kwargs)
        except SuspiciousOperation as error:
            logger.warning("Single sign-on refused: %s", error)
            return None

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        """The userinfo claims; the groups come from the verified ID token if userinfo has none."""
        claims = super().get_userinfo(access_token, id_token, payload)
        if self.groups_claim not in claims and self.groups_claim in payload:
            claims[self.groups_claim] = payload[self.groups_claim]
        return claims

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        return bool(claims.get("preferred_username"))

    def filter_users_by_claims(self, claims: dict[str, Any]) -> QuerySet[Any]:
        return self.UserModel.objects.filter(username=claims.get("preferred_username", ""))

    @transaction.atomic
    def create_user(self, claims: dict[str, Any]) -> Any:
        user = save_user_from_claims(user=None, claims=claims)
        self.sync_memberships(user, claims)
        return user

    @transaction.atomic
    def update_user(self, user: Any, claims: dict[str, Any]) -> Any:
        if user.is_superuser:
            # A superuser is a local break-glass account: the provider's groups cannot bound it.
            raise SuspiciousOperation(f"superuser {user.get_username()} signs in with a password")
        if not user.is_active:
            return user  # the callback refuses an inactive user; its memberships stay as they are
        user = save_user_from_claims(user=user, claims=claims)
        self.sync_memberships(user, claims)
        return user

    def sync_memberships(self, user: Any, claims: dict[str, Any]) -> None:
        groups = groups_from_claim(claims.get(self.groups_claim))
        sync_memberships_from_groups(user=user, groups=groups, group_map=self.group_map)

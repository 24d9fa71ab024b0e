"""Single sign-on: mozilla-django-oidc's backend, with accounts found by the provider's subject
and memberships that follow the provider's groups (`tenants.services.identity`)."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from django.http import HttpRequest
from django.utils.functional import cached_property
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from tenants.services.identity import (
    GroupGrant,
    IdentityConflict,
    ProviderSubject,
    create_account_for_subject,
    groups_from_claim,
    linked_account,
    parse_group_map,
    sync_memberships_from_groups,
    update_account_from_claims,
)
from tenants.services.organisation import record_audit_event

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

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        """The account linked to the ID token's issuer and subject; a new one on a subject's
        first sign-in. The username is a display name here, never the key. A refusal (a name
        taken by an unlinked account, a superuser) is audited with its reason and is a failed
        sign-in."""
        claims = self.get_userinfo(access_token, id_token, payload)
        if not self.verify_claims(claims):
            raise SuspiciousOperation("the provider sent no preferred_username")
        subject = ProviderSubject(
            issuer=str(payload.get("iss") or ""), subject=str(payload.get("sub") or "")
        )
        if not subject.subject:
            raise SuspiciousOperation("the ID token has no subject")
        if str(claims.get("sub", subject.subject)) != subject.subject:
            # OIDC Core 5.3.4: userinfo answers for the ID token's subject or not at all.
            raise SuspiciousOperation("userinfo is about another subject than the ID token")
        try:
            return self._sign_in(subject, claims)
        except IdentityConflict as refusal:
            logger.warning("Single sign-on refused: %s", refusal)
            record_audit_event(
                actor=None,
                action="auth.sso_refused",
                target=subject,
                message=str(refusal),
                data={
                    "username": str(claims["preferred_username"]),
                    "issuer": subject.issuer,
                    "subject": subject.subject,
                },
            )
            return None

    @transaction.atomic
    def _sign_in(self, subject: ProviderSubject, claims: dict[str, Any]) -> Any:
        user = linked_account(subject)
        if user is None:
            user = create_account_for_subject(subject=subject, claims=claims)
        elif user.is_superuser:
            # A superuser is a local break-glass account: the provider's groups cannot bound it.
            raise IdentityConflict(f"superuser {user.get_username()} signs in with a password")
        elif not user.is_active:
            return user  # the callback refuses an inactive user; its memberships stay as they are
        else:
            user = update_account_from_claims(user=user, claims=claims)
        groups = groups_from_claim(claims.get(self.groups_claim))
        sync_memberships_from_groups(user=user, groups=groups, group_map=self.group_map)
        return user

"""API authentication: knox's personal tokens, noting when each was last used."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from knox.auth import TokenAuthentication

from tenants.services.tokens import note_token_use


class NamedTokenAuthentication(TokenAuthentication):
    """knox's token check; a token that passes has its last use recorded (once a minute)."""

    def validate_user(self, auth_token: Any) -> tuple[Any, Any]:
        user, token = super().validate_user(auth_token)
        note_token_use(token)
        return user, token


class NamedTokenScheme(OpenApiAuthenticationExtension):
    """The schema's security scheme for these tokens: knox's, under the same name."""

    target_class = NamedTokenAuthentication
    name = "knoxApiToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return build_bearer_security_scheme_object(
            header_name="Authorization",
            token_prefix=self.target.authenticate_header(""),
        )

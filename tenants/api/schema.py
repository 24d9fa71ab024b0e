"""OpenAPI description of the portal's token authentication (registered when the app is ready).

drf-spectacular describes knox's own class; without this it warns about our subclass on every
endpoint, and `check --deploy --fail-level WARNING` fails.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object


class PortalTokenScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.api.auth.PortalTokenAuthentication"
    name = "knoxApiToken"

    def get_security_definition(self, auto_schema: Any) -> Any:
        return build_bearer_security_scheme_object(
            header_name="Authorization", token_prefix="Token"
        )

"""Project secret values at rest: sealed with Fernet (AES-128-CBC + HMAC-SHA256).

The database keeps a secret's values only so that the Kubernetes Secret can be made again when
its namespace is re-created; nothing reads them back out but the launch path that writes the
cluster's copy. The key is `PROJECT_SECRETS_KEY`, else one derived from `SECRET_KEY`: rotating
that key without the other makes the stored values unreadable (leads enter them again).
"""

from __future__ import annotations

import base64
import hashlib
import json

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


class SealError(Exception):
    """Stored values cannot be opened with the current key."""


def _fernet() -> Fernet:
    secret = getattr(settings, "PROJECT_SECRETS_KEY", "") or settings.SECRET_KEY
    digest = hashlib.sha256(f"gpu-portal project secrets:{secret}".encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def seal(values: dict[str, str]) -> str:
    """`values` encrypted and authenticated, as text for a database column."""
    return _fernet().encrypt(json.dumps(values, sort_keys=True).encode()).decode()


def unseal(token: str) -> dict[str, str]:
    """The values `seal` sealed; `SealError` when the key changed or the text was altered."""
    if not token:
        return {}
    try:
        data = json.loads(_fernet().decrypt(token.encode()))
    except InvalidToken as exc:
        raise SealError("the stored secret cannot be opened with the current key") from exc
    return {str(k): str(v) for k, v in data.items()}

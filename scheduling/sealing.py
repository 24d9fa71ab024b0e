"""Secret values at rest (project secrets, registered clusters' kubeconfigs): sealed with Fernet
(AES-128-CBC + HMAC-SHA256), with key rotation through `MultiFernet`.

The database keeps a secret's values only so that the Kubernetes Secret can be made again when
its namespace is re-created; nothing reads them back out but the launch path that writes the
cluster's copy. The keys are `SECRET_SEALING_KEYS`, the current one first and retired ones
after it: values are sealed with the first and opened with any. Without that list the one key
is `PROJECT_SECRETS_KEY`, else `SECRET_KEY` (with Django's `SECRET_KEY_FALLBACKS` as retired
keys). `manage.py rotate_sealed_secrets` re-seals every stored value with the current key, after
which the retired keys can be dropped. Each key may be any text: it is hashed into a Fernet key.
"""

from __future__ import annotations

import base64
import hashlib
import json

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


class SealError(Exception):
    """Stored values cannot be opened with any of the keys."""


def sealing_secrets() -> list[str]:
    """The keys as configured, the one that seals first."""
    listed = [key for key in getattr(settings, "SECRET_SEALING_KEYS", []) if key]
    if listed:
        return listed
    single = getattr(settings, "PROJECT_SECRETS_KEY", "")
    if single:
        return [single]
    return [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]


def _fernet_key(secret: str) -> bytes:
    digest = hashlib.sha256(f"gpu-portal project secrets:{secret}".encode()).digest()
    return base64.urlsafe_b64encode(digest)


def _fernet() -> MultiFernet:
    return MultiFernet([Fernet(_fernet_key(secret)) for secret in sealing_secrets()])


def seal(values: dict[str, str]) -> str:
    """`values` encrypted and authenticated with the current key, as text for a column."""
    return _fernet().encrypt(json.dumps(values, sort_keys=True).encode()).decode()


def unseal(token: str) -> dict[str, str]:
    """The values `seal` sealed; `SealError` when no key opens them or the text was altered."""
    if not token:
        return {}
    try:
        data = json.loads(_fernet().decrypt(token.encode()))
    except InvalidToken as exc:
        raise SealError("the stored secret cannot be opened with any of the keys") from exc
    return {str(k): str(v) for k, v in data.items()}


def reseal(token: str) -> str:
    """The same values sealed again with the current key; `SealError` if no key opens them."""
    if not token:
        return token
    try:
        return _fernet().rotate(token.encode()).decode()
    except InvalidToken as exc:
        raise SealError("the stored secret cannot be opened with any of the keys") from exc

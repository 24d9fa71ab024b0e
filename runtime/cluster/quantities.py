"""Kubernetes quantities (`"500m"`, `"1Gi"`, `"1e3"`) as exact numbers. Pure: no client."""

from __future__ import annotations

import re
from decimal import Decimal

_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_SUFFIXES = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))((?:[KMGTPE]i)|[eE][+-]?[0-9]+|[numkMGTPE]?)$"
)


def quantity(value: str | int | float) -> Decimal:
    """A Kubernetes quantity as a Decimal: `"500m"` → 0.5, `"1Gi"` → 1073741824, `"1e3"` → 1000."""
    match = _QUANTITY.match(str(value).strip())
    if match is None:
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    number, suffix = Decimal(match.group(1)), match.group(2)
    if suffix in _BINARY_SUFFIXES:
        return number * (1024 ** _BINARY_SUFFIXES[suffix])
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        return number.scaleb(int(suffix[1:]))
    return number.scaleb(_DECIMAL_SUFFIXES[suffix])

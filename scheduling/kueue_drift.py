"""Under SCHEDULER=kueue: what the last check of the cluster's Kueue objects against the portal's
policy found. The runtime's periodic reconcile writes it; the fleet page and /metrics read it.

Kept in the cache (Redis in production): a status that the next check replaces, not a record.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.core.cache import cache
from django.utils import timezone

CACHE_KEY = "kueue-policy-check"
# Kept well past the check period, so a stalled checker shows as an old check, not as nothing.
KEEP_SECONDS = 24 * 3600


@dataclass(frozen=True)
class PolicyCheck:
    checked_at: datetime
    # One line per object that differed ("update ClusterQueue gpu-portal-vision (spec...)").
    differences: tuple[str, ...]
    applied: bool
    error: str = ""


def record_check(differences: list[str], *, applied: bool, error: str = "") -> PolicyCheck:
    check = PolicyCheck(timezone.now(), tuple(differences), applied, error)
    cache.set(CACHE_KEY, check, KEEP_SECONDS)
    return check


def last_check() -> PolicyCheck | None:
    found = cache.get(CACHE_KEY)
    return found if isinstance(found, PolicyCheck) else None

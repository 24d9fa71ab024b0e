"""What the portal has made ready on a cluster before launches need it, shared by every process.

Priority classes, a project's namespace (quota, limit range, network policies) and its data are
ensured when a project or a quota is created or changed (`push_project_quotas`), and again by a
launch that finds no fresh record of them. The record lives in the database, so the first launch
of each worker process does not pay for them again: a steady-state launch makes only its
workload's own API calls.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import weakref
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.utils import timezone

from runtime.models import EnsuredObject
from scheduling.models import Cluster

# How long what was ensured is trusted to still be there as ensured; later launches check again,
# so drift made on the cluster by hand converges within this long.
ENSURED_TTL_SECONDS = 600.0


def cluster_key(cluster: Cluster | None) -> str:
    """The cluster a record is about: the local one (the settings' backend) or a registered one."""
    return "local" if cluster is None or cluster.is_local else f"cluster-{cluster.pk}"


def spec_digest(spec: object) -> str:
    """A stable fingerprint of a spec (dataclasses, tuples and mappings of them)."""

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, list | tuple):
            return [plain(item) for item in value]
        if isinstance(value, dict):
            return {str(key): plain(item) for key, item in value.items()}
        return value

    text = json.dumps(plain(spec), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class EnsuredObjects:
    """What one backend has ensured on its cluster, keyed by what was ensured and remembered
    with the spec it was ensured with: in this process, then in the database.

    A spec that changed (a new quota) is ensured again at once; a remembered one after
    ENSURED_TTL_SECONDS, or when a launch answers 404 (namespace deleted meanwhile, `forget`).
    """

    def __init__(self, *, cluster: str, ttl_seconds: float = ENSURED_TTL_SECONDS) -> None:
        self.cluster = cluster
        self.ttl_seconds = ttl_seconds
        self._seen: dict[str, tuple[str, float]] = {}

    def ensure(self, key: str, spec: object, create: Callable[[], None]) -> bool:
        """Run `create()` unless `spec` was ensured under `key` lately; True if it ran."""
        digest = spec_digest(spec)
        seen = self._seen.get(key)
        if seen is not None and seen[0] == digest and time.monotonic() - seen[1] < self.ttl_seconds:
            return False
        fresh_since = timezone.now() - timedelta(seconds=self.ttl_seconds)
        recorded = (
            EnsuredObject.objects.filter(cluster=self.cluster, key=key, digest=digest)
            .values_list("ensured_at", flat=True)
            .first()
        )
        if recorded is not None and recorded > fresh_since:
            age = (timezone.now() - recorded).total_seconds()
            self._seen[key] = (digest, time.monotonic() - age)
            return False
        create()
        self.record(key, spec)
        return True

    def record(self, key: str, spec: object) -> None:
        """`spec` was just ensured under `key`."""
        digest = spec_digest(spec)
        row = EnsuredObject(cluster=self.cluster, key=key, digest=digest, ensured_at=timezone.now())
        EnsuredObject.objects.bulk_create(
            [row],
            update_conflicts=True,
            unique_fields=["cluster", "key"],
            update_fields=["digest", "ensured_at"],
        )
        self._seen[key] = (digest, time.monotonic())

    def forget(self, *keys: str) -> None:
        for key in keys:
            self._seen.pop(key, None)
        EnsuredObject.objects.filter(cluster=self.cluster, key__in=keys).delete()


_ensured_by_backend: weakref.WeakKeyDictionary[Any, dict[str, EnsuredObjects]] = (
    weakref.WeakKeyDictionary()
)


def ensured_objects(backend: object, cluster: Cluster | None) -> EnsuredObjects:
    """The memory of what `backend` ensured on `cluster`, kept in this process as long as the
    backend itself."""
    key = cluster_key(cluster)
    try:
        by_cluster = _ensured_by_backend.setdefault(backend, {})
    except TypeError:  # a backend that cannot be weakly referenced remembers only the records
        return EnsuredObjects(cluster=key)
    return by_cluster.setdefault(key, EnsuredObjects(cluster=key))

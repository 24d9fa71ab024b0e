"""Writes of the cluster registry: register a cluster, change it, replace its kubeconfig, delete it.

A registered cluster's kubeconfig is checked (a current context that names a cluster with a
server URL and a user), its API server copied out for people to see, and the whole text sealed
(scheduling/sealing.py) into `kubeconfig_sealed`: nothing shows it again, not the API, the
pages, the admin or the audit trail, which records only that it was replaced. The `local`
cluster is this deployment's own (its settings name the credentials): it takes no kubeconfig
and is never deleted. A cluster that still holds pools is not deleted either (409).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import yaml
from django.db import transaction

from scheduling import dispatch
from scheduling.choices import SchedulerMode
from scheduling.models import LOCAL_CLUSTER_SLUG, Cluster, Flavor, NodePool
from scheduling.sealing import seal
from scheduling.services.common import invalid_field
from tenants.errors import ConflictError, DomainError
from tenants.scope import Actor
from tenants.services.organisation import (
    apply_changes,
    audit_value,
    delete_unused,
    known_fields,
    record_audit_event,
    require_platform_admin,
    save_valid,
)

CLUSTER_FIELDS = frozenset({"name", "slug", "scheduler", "is_active", "prometheus_url"})
MAX_KUBECONFIG_CHARS = 256 * 1024


def _bad_kubeconfig(message: str) -> DomainError:
    return invalid_field("kubeconfig", f"The kubeconfig is not usable: {message}")


def _named(entries: Any, name: str, what: str) -> dict[str, Any]:
    """The body of the `name`d entry of a kubeconfig list (clusters, users, contexts)."""
    if not isinstance(entries, list):
        raise _bad_kubeconfig(f"it has no {what}s list.")
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(what)
            if not isinstance(body, dict):
                raise _bad_kubeconfig(f"{what} {name!r} is empty.")
            return body
    raise _bad_kubeconfig(f"{what} {name!r} is not defined.")


def api_server_of(kubeconfig_text: str) -> str:
    """The API server a kubeconfig's current context points at; a 400 naming `kubeconfig` when
    the text is not YAML, or has no current context with a cluster (server URL) and a user."""
    if not kubeconfig_text.strip():
        raise invalid_field("kubeconfig", "Give the cluster's kubeconfig.")
    if len(kubeconfig_text) > MAX_KUBECONFIG_CHARS:
        raise _bad_kubeconfig(f"it is longer than {MAX_KUBECONFIG_CHARS // 1024} KiB.")
    try:
        config = yaml.safe_load(kubeconfig_text)
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise _bad_kubeconfig(f"it is not valid YAML{line}.") from error
    if not isinstance(config, dict):
        raise _bad_kubeconfig("it is not a YAML mapping.")
    current = config.get("current-context")
    if not current or not isinstance(current, str):
        raise _bad_kubeconfig("it names no current-context.")
    context = _named(config.get("contexts"), current, "context")
    cluster_name, user_name = context.get("cluster"), context.get("user")
    if not cluster_name:
        raise _bad_kubeconfig(f"context {current!r} names no cluster.")
    if not user_name:
        raise _bad_kubeconfig(f"context {current!r} names no user.")
    server = _named(config.get("clusters"), str(cluster_name), "cluster").get("server")
    _named(config.get("users"), str(user_name), "user")
    parts = urlsplit(str(server or ""))
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise _bad_kubeconfig(f"cluster {cluster_name!r} has no http(s) server URL.")
    return str(server)


def _audit(
    actor: Actor, action: str, cluster: Cluster, data: dict[str, Any], message: str = ""
) -> None:
    record_audit_event(actor=actor, action=action, target=cluster, data=data, message=message)


@transaction.atomic
def register_cluster(
    *,
    actor: Actor,
    name: str,
    slug: str,
    kubeconfig_text: str,
    scheduler: str = SchedulerMode.PORTAL,
    is_active: bool = True,
    prometheus_url: str = "",
) -> Cluster:
    """A new cluster reached with `kubeconfig_text` (sealed; its API server is kept in clear);
    its GPU activity is read from `prometheus_url` (empty: the PROMETHEUS_URL setting)."""
    require_platform_admin(actor, "register clusters")
    if slug == LOCAL_CLUSTER_SLUG:
        raise invalid_field("slug", f"'{LOCAL_CLUSTER_SLUG}' is this deployment's own cluster.")
    api_server = api_server_of(kubeconfig_text)
    cluster = Cluster(
        name=name,
        slug=slug,
        scheduler=scheduler,
        is_active=is_active,
        prometheus_url=prometheus_url,
        api_server=api_server,
        kubeconfig_sealed=seal({"kubeconfig": kubeconfig_text}),
    )
    save_valid(cluster)
    fields = {
        "name": name,
        "slug": slug,
        "scheduler": scheduler,
        "is_active": is_active,
        "prometheus_url": prometheus_url,
    }
    _audit(actor, "cluster.registered", cluster, {"fields": audit_value(fields)}, api_server)
    dispatch.request_scheduling_cycle()
    return cluster


@transaction.atomic
def update_cluster(
    *, actor: Actor, cluster: Cluster, kubeconfig_text: str = "", **fields: Any
) -> Cluster:
    """Change a cluster's name, slug, scheduler mode, activity or Prometheus URL; a non-empty
    `kubeconfig_text` replaces its kubeconfig (write-only: the audit says only that it did)."""
    require_platform_admin(actor, "change clusters")
    fields = known_fields(fields, CLUSTER_FIELDS)
    is_local = cluster.slug == LOCAL_CLUSTER_SLUG
    if is_local and fields.get("slug", cluster.slug) != cluster.slug:
        raise invalid_field("slug", "The local cluster keeps its slug.")
    if not is_local and fields.get("slug") == LOCAL_CLUSTER_SLUG:
        raise invalid_field("slug", f"'{LOCAL_CLUSTER_SLUG}' is this deployment's own cluster.")
    if is_local and fields.get("scheduler", cluster.scheduler) != cluster.scheduler:
        raise invalid_field(
            "scheduler", "The local cluster's scheduler mode is the SCHEDULER setting."
        )
    changes = apply_changes(cluster, fields)
    if kubeconfig_text.strip():
        if is_local:
            raise invalid_field(
                "kubeconfig", "The local cluster uses this deployment's own credentials."
            )
        cluster.api_server = api_server_of(kubeconfig_text)
        cluster.kubeconfig_sealed = seal({"kubeconfig": kubeconfig_text})
        changes["kubeconfig"] = ["(sealed)", "(replaced)"]
    save_valid(cluster)
    _audit(actor, "cluster.updated", cluster, {"changes": changes})
    if changes:  # another scheduler mode, an inactive cluster: the next cycle plans with it
        dispatch.request_scheduling_cycle()
    return cluster


@transaction.atomic
def delete_cluster(*, actor: Actor, cluster: Cluster) -> None:
    """Delete a registered cluster without pools; the local one and one with pools: 409."""
    require_platform_admin(actor, "delete clusters")
    if cluster.slug == LOCAL_CLUSTER_SLUG:
        raise ConflictError("cluster_is_local", "The local cluster is this deployment's own.")
    pools = list(cluster.pools.values_list("slug", flat=True)[:5])
    if pools:
        raise ConflictError(
            "cluster_in_use",
            f"Cluster {cluster} still holds pools ({', '.join(pools)}): move or delete them first.",
        )
    _audit(actor, "cluster.deleted", cluster, {"slug": cluster.slug}, message=cluster.name)
    delete_unused(
        cluster,
        code="cluster_in_use",
        message=f"Cluster {cluster} is still named by pools or requests: deactivate it instead.",
    )


def pools_of_flavor(flavor: Flavor) -> list[NodePool]:
    """The pools a request of `flavor` may run in: its own pool, then its other pools."""
    return [flavor.pool, *(p for p in flavor.other_pools.all() if p.pk != flavor.pool_id)]


def check_request_cluster(*, flavor: Flavor, cluster: Cluster | None) -> None:
    """A request that names a cluster needs it active and holding one of the flavor's pools."""
    if cluster is None:
        return
    if not cluster.is_active:
        raise invalid_field("cluster", f"Cluster {cluster} takes no new work (inactive).")
    if not any(pool.cluster_id == cluster.pk for pool in pools_of_flavor(flavor)):
        raise invalid_field(
            "cluster", f"Cluster {cluster} has no pool of {flavor}: choose another or none."
        )

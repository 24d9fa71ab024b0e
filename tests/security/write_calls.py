"""One valid call for every write operation of the API, for the contract run to reach the services.

Generated bodies and path ids almost never name objects that exist and are within the caller's
reach, so a fuzzing run alone tests validation: it never sees a write succeed. `WRITES` says, per
operation (`"METHOD /path/"` as the schema spells it), who makes the call and with what: a body
naming the fixtures' objects, and a path id of an object made for it or created by the run's
own POST a step before (a create, then its change, then its delete: the links the schema
implies). The run is state-aware: the calls are made in the order listed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.utils import timezone

from accounting.selectors.usage import current_month
from scheduling.models import GpuRequest, Tier
from scheduling.services.project_data import set_storage_quota
from tests.support.clusters import kubeconfig_text
from tests.support.factories import (
    GpuRequestFactory,
    TeamFactory,
    UserFactory,
    admit,
    launch,
    report_running,
)
from tests.support.fleet import Fleet
from tests.support.personas import Org

PREFIX = "/api/v1"


@dataclass
class World:
    """The objects the calls name: the org, the demo fleet, and what earlier calls created."""

    org: Org
    fleet: Fleet
    created: dict[str, int] = field(default_factory=dict)  # collection path -> id
    made: dict[str, int] = field(default_factory=dict)  # recipe key -> id of an object made

    def once(self, key: str, make: Callable[[], Any]) -> int:
        """The id of the object `make()` returns, made the first time `key` is asked."""
        if key not in self.made:
            self.made[key] = make().pk
        return self.made[key]


Body = Callable[[World], Any] | None
Target = Callable[[World], int | None] | None


@dataclass(frozen=True)
class Write:
    method: str
    path: str
    role: str  # an attribute of Org
    body: Body = None
    target: Target = None  # the `{id}` of the path


def _created(collection: str) -> Target:
    return lambda world: world.created.get(collection)


def crud(
    resource: str, role: str, create: Body, change: dict[str, Any], *, writer: str | None = None
) -> list[Write]:
    """Create as `role`, then change and delete what was created as `writer` (default `role`)."""
    collection = f"{PREFIX}/{resource}/"
    detail = f"{collection}{{id}}/"
    return [
        Write("POST", collection, role, create),
        Write("PATCH", detail, writer or role, lambda world: change, _created(collection)),
        Write("DELETE", detail, writer or role, None, _created(collection)),
    ]


def start(world: World, **fields: Any) -> GpuRequest:
    """A request of team A's developer, running. A transactional test runs the cycle (and the
    launch) queued on commit at once, so each step is taken only if it has not happened yet."""
    request = GpuRequestFactory.create(
        project=world.org.project_a, flavor=world.fleet.l4_6g, actor=world.org.dev_a, **fields
    )
    request.refresh_from_db()
    if request.status == "queued":
        admit(request)
    if request.status == "admitted":
        launch(request)
        request.refresh_from_db()
    if request.status != "running":
        report_running(request)
    request.refresh_from_db()
    assert request.status == "running", request.status
    return request


def pending(world: World, key: str) -> int:
    """A whole A100 of team A's developer: the training tier's rule leaves it to the lead."""

    def make() -> GpuRequest:
        request = GpuRequestFactory.create(
            project=world.org.project_a, flavor=world.fleet.a100, actor=world.org.dev_a
        )
        assert request.status == "pending_approval", request.status
        return request

    return world.once(key, make)


def running(world: World) -> int:
    return world.once("running", lambda: start(world, max_runtime_seconds=4 * 3600))


def running_notebook(world: World) -> int:
    return world.once("running notebook", lambda: start(world, kind="notebook"))


def reclaimed_notebook(world: World) -> int:
    from runtime.services.reclaim import reclaim_request

    def make() -> GpuRequest:
        request = start(world, kind="notebook")
        assert reclaim_request(request, reason="Reclaimed: idle.", code="idle", evidence={})
        return request

    return world.once("reclaimed", make)


def notification(world: World) -> int:
    from scheduling.services.notifications import notify
    from tenants.models import Notification

    def make() -> Notification:
        notify(users=[world.org.dev_a], subject="GPU request 1 rejected", body="Too big.",
               event={"type": "request.rejected", "request": 1})  # fmt: skip
        return Notification.objects.filter(recipient=world.org.dev_a).latest("pk")

    return world.once("notification", make)


def storage_quota_of_team_a(world: World) -> None:
    """Workspaces draw on their team's storage quota."""
    world.once(
        "storage",
        lambda: set_storage_quota(actor=world.org.admin, team=world.org.team_a, limit_gib=500),
    )


def workspace_body(world: World) -> dict[str, Any]:
    storage_quota_of_team_a(world)
    return {"project": world.org.project_a2.pk, "size_gib": 50}


def spare_tier() -> Tier:
    """A tier with neither approval rule nor reclaim policy, for those to be created on."""
    return Tier.objects.get_or_create(slug="spare", defaults={"name": "Spare"})[0]


def _later(days: int = 7) -> str:
    return (timezone.now() + timedelta(days=days)).isoformat()


def _last_month() -> str:
    first = current_month()
    return f"{first - timedelta(days=1):%Y-%m}"


def _request_action(action: str, role: str, target: Target, body: Body = None) -> Write:
    return Write("POST", f"{PREFIX}/requests/{{id}}/{action}/", role, body, target)


WRITES: list[Write] = [
    *crud("tiers", "admin",
          lambda w: {"name": "Batch", "slug": "batch", "max_runtime_seconds": 3600},
          {"rank": 4}),
    *crud("pools", "admin",
          lambda w: {"name": "B200", "slug": "b200", "tier": "training",
                     "sharing_mode": "exclusive"},
          {"short_reserve_fraction": 0.25}),
    *crud("flavors", "admin",
          lambda w: {"name": "A100 40G", "slug": "a100-40g", "pool": w.fleet.a100.pool.slug,
                     "kind": "whole", "gpu_model": "A100-40G", "gpu_memory_mib": 40960,
                     "gpu_equivalent": "1"},
          {"is_active": False}),
    *crud("approval-rules", "admin",
          lambda w: {"tier": spare_tier().slug, "approval_ttl_hours": 24},
          {"approval_ttl_hours": 12}),
    *crud("reclaim-policies", "admin",
          lambda w: {"tier": spare_tier().slug, "idle_window_seconds": 900,
                     "idle_warning_seconds": 120},
          {"max_attempts": 5}),
    *crud("prices", "admin",
          lambda w: {"flavor": w.fleet.a100.pk, "price_per_hour": "2.7500",
                     "effective_from": _later()},
          {"price_per_hour": "2.9000"}),
    *crud("resource-prices", "admin",
          lambda w: {"resource": "cpu", "price_per_hour": "0.03000000",
                     "effective_from": _later()},
          {"price_per_hour": "0.04000000"}),
    *crud("clusters", "admin",
          lambda w: {"name": "West", "slug": "west", "scheduler": "kueue",
                     "kubeconfig": kubeconfig_text("https://gpu-west.example:6443")},
          {"is_active": False}),
    *crud("teams", "admin", lambda w: {"name": "Robotics", "slug": "robotics"},
          {"name": "Renamed"}),
    *crud("webhooks", "admin",
          lambda w: {"name": "Teams GPU channel", "payload_format": "teams",
                     "url": "https://example.webhook.office.com/workflows/abc"},
          {"is_active": False}),
    *crud("storage-quotas", "admin",
          lambda w: {"team": TeamFactory.create().pk, "limit_gib": 200}, {"limit_gib": 900}),
    *crud("quotas", "lead_a",
          lambda w: {"team": w.org.team_a.pk, "project": w.org.project_a.pk,
                     "flavor": w.fleet.l4_6g.pk, "guaranteed": 1, "limit": 2},
          {"limit": 2}, writer="admin"),
    *crud("budgets", "lead_a",
          lambda w: {"team": w.org.team_a.pk, "unit": "gpu_hours", "amount": "3"},
          {"amount": "20"}),
    *crud("projects", "lead_a",
          lambda w: {"team": w.org.team_a.pk, "name": "New", "slug": "new"},
          {"name": "Renamed"}),
    *crud("members", "lead_a",
          lambda w: {"user": UserFactory.create(username="newcomer").username,
                     "team": w.org.team_a.pk, "role": "developer"},
          {"role": "team_lead", "fair_share_weight": 3}),
    *crud("project-secrets", "lead_a",
          lambda w: {"project": w.org.project_a.pk, "name": "wandb", "data": {"api-key": "k"}},
          {"data": {"token": "rotated"}}),
    *crud("workspaces", "lead_a", workspace_body, {"size_gib": 200}),
    *crud("templates", "lead_a",
          lambda w: {"name": "Big job", "team": w.org.team_a.pk, "is_shared": True,
                     "flavor": w.fleet.l4_6g.pk, "kind": "job",
                     "image": "registry.example.com/ml/train:2.4", "command": [],
                     "env": {"EPOCHS": "3"}, "gpu_count": 1, "max_runtime_seconds": 3600},
          {"image": "registry.example.com/ml/notebook:2.5"}),
    Write("POST", f"{PREFIX}/requests/", "dev_a",
          lambda w: {"project": w.org.project_a.pk, "flavor": w.fleet.l4_6g.pk, "gpu_count": 1,
                     "image": "registry.example.com/ml/train:2.4",
                     "max_runtime_seconds": 3600}),
    _request_action("approve", "lead_a", lambda w: pending(w, "to approve"), lambda w: {}),
    _request_action("reject", "lead_a", lambda w: pending(w, "to reject"),
                    lambda w: {"comment": "Too big."}),
    _request_action("cancel", "dev_a", lambda w: pending(w, "to cancel"), lambda w: {}),
    _request_action("resubmit", "dev_a", lambda w: pending(w, "to cancel")),
    _request_action("extend", "lead_a", running, lambda w: {"seconds": 600}),
    _request_action("idle-exemption", "lead_a", running, lambda w: {"hours": 2}),
    _request_action("ask-extension", "dev_a", running, lambda w: {"reason": "epoch 9 of 10"}),
    _request_action("ask-idle-exemption", "dev_a", running,
                    lambda w: {"reason": "a long data load"}),
    _request_action("resume", "dev_a", reclaimed_notebook),
    _request_action("keep-alive", "dev_a", running_notebook),
    Write("POST", f"{PREFIX}/notifications/{{id}}/read/", "dev_a", None, notification),
    Write("POST", f"{PREFIX}/notifications/read-all/", "dev_a"),
    Write("PUT", f"{PREFIX}/me/notification-settings/", "dev_a",
          lambda w: {"in_app_topics": ["finished"], "email_enabled": False, "email_topics": [],
                     "webhook_url": "https://hooks.slack.com/services/T/B/X",
                     "webhook_format": "slack", "webhook_topics": ["preempted"]}),
    Write("PATCH", f"{PREFIX}/me/notification-settings/", "dev_a",
          lambda w: {"email_enabled": True}),
    Write("POST", f"{PREFIX}/statements/close/", "finance",
          lambda w: {"team": w.org.team_a.pk, "month": _last_month()}),
]  # fmt: skip

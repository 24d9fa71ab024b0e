"""Tenant isolation, proven route by route from the URL resolver (new routes join by themselves).

For every route with an object id, team A's developer and lead aim at team B's object with
every method the route offers (and as an HTMX request): the answer is 404, never 403 or 200,
and B's object is unchanged. For every route without an id (lists, pages, exports, fragments),
A's people ask with B's ids in the filters: no trace of team B appears in the body. Team B's
names are canaries: distinctive strings that must never show up in anything A receives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.db import models
from django.forms import ModelForm
from django.forms.models import model_to_dict
from django.test import Client
from django.urls import reverse
from knox.models import AuthToken
from rest_framework import serializers

from scheduling.models import GpuRequest, Quota
from tenants.models import AuditEvent, Membership, Project, ScopedQuerySet, Team
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.security.isolation import (
    FORWARD_AUTH_ROUTES,
    KWARG_MODELS,
    NON_OBJECT_KWARGS,
    collection_routes,
    route_model,
)
from tests.support.cross_tenant import covers
from tests.support.personas import Org, api_client
from tests.support.routes import Route, object_routes

pytestmark = pytest.mark.django_db

CANARIES = ("Canary Team", "canary-team", "Canary Project", "canary-proj", "lead_b", "dev_b")
# Filters a caller could try to reach another team through; unknown ones are ignored or 400.
FILTER_NAMES = ("team", "team_id", "project", "project_id", "owner", "user", "actor")

OBJECT_ROUTES = object_routes()
covers(*(route.name for route in OBJECT_ROUTES))(lambda: None)


@dataclass
class World:
    org: Org
    fleet: Fleet
    b_request: GpuRequest
    b_token: AuthToken

    def target(self, model: type[models.Model]) -> models.Model | None:
        """An object of `model` that B's lead sees and A's people do not (None: shared catalog)."""
        if model is AuthToken:
            return self.b_token
        if model._meta.label in ADMIN_ONLY:
            return ADMIN_ONLY[model._meta.label](self)
        queryset = model._default_manager.all()
        assert isinstance(queryset, ScopedQuerySet), f"{model.__name__} has no visible_to()"
        seen_by_a = set(queryset.visible_to(self.org.lead_a).values_list("pk", flat=True))
        seen_by_a |= set(queryset.visible_to(self.org.dev_a).values_list("pk", flat=True))
        only_b = queryset.visible_to(self.org.lead_b).exclude(pk__in=seen_by_a).order_by("pk")
        if not only_b.exists() and model._meta.label in B_FACTORIES:
            B_FACTORIES[model._meta.label](self)
        return only_b.first()

    def url_kwargs(self, route: Route, target: models.Model) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        for name in route.kwarg_names:
            if name in NON_OBJECT_KWARGS:
                kwargs[name] = NON_OBJECT_KWARGS[name]
            elif name == "token_key":
                kwargs[name] = self.b_token.token_key
            elif name in KWARG_MODELS and not isinstance(target, KWARG_MODELS[name]):
                kwargs[name] = self._any_of(KWARG_MODELS[name]).pk
            elif name in ("pk", *KWARG_MODELS):
                kwargs[name] = target.pk
            elif name == "slug":
                kwargs[name] = target.slug  # type: ignore[attr-defined]
            else:
                raise LookupError(f"route {route.name}: teach the isolation walk about <{name}>")
        return kwargs

    def _any_of(self, model: type[models.Model]) -> models.Model:
        if model is Project:
            return self.org.project_b
        found = model._default_manager.order_by("pk").first()
        assert found is not None, f"the world has no {model.__name__}"
        return found


def _b_budget(world: World) -> None:
    from accounting.models import Budget

    fields: dict[str, Any] = {f.name: f for f in Budget._meta.get_fields()}
    Budget.objects.create(
        team=world.org.team_b,
        unit=fields["unit"].choices[0][0],
        amount=100,
        over_budget_policy=fields["over_budget_policy"].choices[0][0],
    )


def _b_statement(world: World) -> None:
    import datetime

    from accounting.models import Statement

    Statement.objects.create(
        team=world.org.team_b,
        period=datetime.date(2026, 1, 1),
        currency="EUR",
        gpu_hours=0,
        cost=0,
    )


def _b_template(world: World) -> None:
    from scheduling.models import RequestTemplate

    RequestTemplate.objects.create(
        team=world.org.team_b, owner=world.org.lead_b, is_shared=True, name="b", image="b:1"
    )


def _b_notification(world: World) -> None:
    from tenants.models import Notification

    Notification.objects.create(
        recipient=world.org.lead_b, kind="approval", event_type="x", subject="Canary Team"
    )


def _b_project_data(world: World) -> None:
    from scheduling.models import ProjectSecret, ProjectWorkspace, StorageQuota

    StorageQuota.objects.get_or_create(team=world.org.team_b, defaults={"limit_gib": 10})
    ProjectWorkspace.objects.get_or_create(project=world.org.project_b, defaults={"size_gib": 5})
    ProjectSecret.objects.get_or_create(project=world.org.project_b, name="canary-team")


def _admin_webhook(world: World) -> models.Model:
    from tenants.models import Webhook

    webhook, _ = Webhook.objects.get_or_create(
        name="canary-team", defaults={"url": "https://hooks.example.net/canary"}
    )
    return webhook


# Objects only platform admins see (a webhook's URL is a credential): every team's people get 404.
ADMIN_ONLY = {"tenants.Webhook": _admin_webhook}

# Team B's object for a model the world fixture does not create by itself: a new tenant-owned
# model whose route the walk reports as "shared" gets its factory here.
B_FACTORIES = {
    "accounting.Budget": _b_budget,
    "accounting.Statement": _b_statement,
    "scheduling.RequestTemplate": _b_template,
    "tenants.Notification": _b_notification,
    "scheduling.StorageQuota": _b_project_data,
    "scheduling.ProjectWorkspace": _b_project_data,
    "scheduling.ProjectSecret": _b_project_data,
}
# The catalogue every member sees (`CatalogQuerySet`): no object of it belongs to team B.
SHARED_CATALOG = {
    "scheduling.Cluster",
    "scheduling.Flavor",
    "scheduling.NodePool",
    "scheduling.Node",
    "scheduling.Tier",
    "scheduling.ApprovalRule",
    "scheduling.ReclaimPolicy",
    "scheduling.NotebookProfile",
    "accounting.Price",
    "accounting.ResourcePrice",
}


@pytest.fixture
def world(org: Org, fleet: Fleet) -> World:
    Team.objects.filter(pk=org.team_b.pk).update(name="Canary Team", slug="canary-team")
    Project.objects.filter(pk=org.project_b.pk).update(name="Canary Project", slug="canary-proj")
    org.team_b.refresh_from_db()
    org.project_b.refresh_from_db()
    response = api_client(org.dev_b).post(
        reverse("gpu-request-list"), request_body(org.project_b, fleet.l4_6g), format="json"
    )
    assert response.status_code == 201, response.content
    token, _ = AuthToken.objects.create(user=org.lead_b)
    return World(org, fleet, GpuRequest.objects.get(pk=response.json()["id"]), token)


def _session_client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _snapshot(obj: models.Model) -> dict[str, Any]:
    fresh = type(obj)._default_manager.filter(pk=obj.pk).first()
    return model_to_dict(fresh) if fresh is not None else {}


def _call(client: Any, method: str, url: str, *, htmx: bool) -> Any:
    headers = {"HX-Request": "true"} if htmx else {}
    payload = {"name": "taken over", "comment": "x", "status": "approved"}
    if isinstance(client, Client):
        return getattr(client, method)(url, payload, headers=headers)
    return getattr(client, method)(url, payload, format="json", headers=headers)


def test_every_object_route_answers_404_to_another_team(world: World) -> None:
    """Each persona of team A, each method, plain and HTMX: 404, and B's object is untouched."""
    org = world.org
    proven, shared = [], []
    for route in OBJECT_ROUTES:
        model = route_model(route)
        target = world.target(model)
        if target is None:
            shared.append(route.name)
            continue
        before = _snapshot(target)
        url = reverse(route.name, kwargs=world.url_kwargs(route, target))
        for persona in (org.dev_a, org.lead_a):
            client = api_client(persona) if route.is_api else _session_client(persona)
            for method in route.methods:
                responses = [_call(client, method, url, htmx=htmx) for htmx in (False, True)]
                statuses = {response.status_code for response in responses}
                allowed = {404, 405} if not route.is_api else {404}
                if route.name in FORWARD_AUTH_ROUTES:
                    allowed = {401, 403, 405}
                assert statuses <= allowed, (
                    f"{persona.username} {method.upper()} {url} ({route.name}): {statuses}"
                )
        assert _snapshot(target) == before, f"{route.name} changed team B's {model.__name__}"
        proven.append(route.name)
    print(f"\nisolation walk: {len(proven)} object routes proven 404, shared catalog: {shared}")
    assert len(proven) >= 15, proven
    # Only the GPU catalogue is shared; anything else without a B-only object is a gap.
    shared_models = {route_model(r)._meta.label for r in OBJECT_ROUTES if r.name in shared}
    assert shared_models <= SHARED_CATALOG, (
        f"no {shared_models} object is hidden from team A: visible_to() leaks, or the model "
        "needs a team-B factory in B_FACTORIES"
    )


def _b_filters(world: World) -> list[dict[str, Any]]:
    org = world.org
    ids: dict[str, Any] = {"team": org.team_b.pk, "team_id": org.team_b.pk}
    ids["project"] = org.project_b.pk
    ids |= {"project_id": org.project_b.pk, "owner": "dev_b", "user": "lead_b", "actor": "dev_b"}
    return [{}, *({name: ids[name]} for name in FILTER_NAMES), {"format": "csv", **ids}]


def test_no_list_page_export_or_fragment_shows_another_team(world: World) -> None:
    """Lists, pages, CSV exports and HTMX fragments, with B's ids in every filter: no canary."""
    org = world.org
    checked = 0
    for route in collection_routes():
        url = reverse(route.name)
        for persona in (org.dev_a, org.lead_a):
            client = api_client(persona) if route.is_api else _session_client(persona)
            for query in _b_filters(world):
                for htmx in (False, True) if not route.is_api else (False,):
                    headers = {"HX-Request": "true"} if htmx else {}
                    response = client.get(url, query, headers=headers)
                    assert response.status_code < 500, (route.name, query, response.status_code)
                    body = b"".join(response) if response.streaming else response.content
                    text = body.decode("utf-8", "replace")
                    leaked = [canary for canary in CANARIES if canary in text]
                    assert not leaked, f"{persona.username} GET {url}?{query}: {leaked}"
                    checked += 1
    print(f"\nisolation walk: {checked} list/page/export/fragment responses without a canary")
    assert checked > 100


def test_related_fields_refuse_another_teams_objects(world: World) -> None:
    """Creating in B's project, or a membership or quota in team B: refused, not applied."""
    org = world.org
    before = GpuRequest.objects.count()
    body = request_body(org.project_b, world.fleet.l4_6g)
    response = api_client(org.dev_a).post(reverse("gpu-request-list"), body, format="json")
    assert response.status_code == 400, response.content
    assert GpuRequest.objects.count() == before
    member = {"user": org.dev_a.pk, "team": org.team_b.pk, "role": "team_lead"}
    response = api_client(org.lead_a).post(reverse("membership-list"), member, format="json")
    assert response.status_code in (400, 403, 404), response.content
    assert not Membership.objects.filter(user=org.dev_a, team=org.team_b).exists()
    quota = {"team": org.team_b.pk, "flavor": world.fleet.l4_6g.pk, "guaranteed": 99, "limit": 99}
    response = api_client(org.lead_a).post(reverse("quota-list"), quota, format="json")
    assert response.status_code in (400, 403), response.content
    assert not Quota.objects.filter(team=org.team_b, guaranteed=99).exists()


# --- Field level ------------------------------------------------------------------------------

PRIVILEGED_FIELDS = {
    "status": "approved",
    "approved_by": None,  # filled with the lead's id below
    "approver": None,
    "team": None,
    "price": "0.01",
    "price_per_gpu_hour": "0.01",
    "quota": 1000,
    "guaranteed": 1000,
    "limit": 1000,
    "role": "team_lead",
}


def _privileged_payload(world: World) -> dict[str, Any]:
    org = world.org
    payload = dict(PRIVILEGED_FIELDS)
    payload.update(approved_by=org.lead_a.pk, approver=org.lead_a.pk, team=org.team_b.pk)
    return payload


def _guarded_state() -> dict[str, Any]:
    """What a developer must never change: quotas, projects' teams, roles, prices, approvals."""
    from accounting.models import Price

    return {
        "quotas": sorted(Quota.objects.values_list("pk", "team_id", "guaranteed", "limit")),
        "projects": sorted(Project.objects.values_list("pk", "team_id", "name")),
        "teams": sorted(Team.objects.values_list("pk", "name")),
        "roles": sorted(Membership.objects.values_list("pk", "user_id", "team_id", "role")),
        "prices": sorted(map(str, Price.objects.values_list())),
        "approvals": sorted(
            GpuRequest.objects.exclude(approved_by=None).values_list("pk", "approved_by_id")
        ),
    }


def test_developer_cannot_set_status_approver_team_price_or_quota_through_any_write(
    world: World,
) -> None:
    """Every write route of the API, as a developer on their own team's objects."""
    org = world.org
    own_request = api_client(org.dev_a).post(
        reverse("gpu-request-list"), request_body(org.project_a, world.fleet.a100), format="json"
    )
    assert own_request.json()["status"] == "pending_approval"
    before = _guarded_state()
    client = api_client(org.dev_a)
    payload = _privileged_payload(world)
    writes = 0
    for route in [*collection_routes(), *OBJECT_ROUTES]:
        if not route.is_api:
            continue
        for method in set(route.methods) - {"get"}:
            if route.kwarg_names:
                model = route_model(route)
                mine = model._default_manager.all()
                if isinstance(mine, ScopedQuerySet):
                    mine = mine.visible_to(org.dev_a)
                target = mine.order_by("pk").first()
                if target is None or "token_key" in route.kwarg_names:
                    continue
                url = reverse(route.name, kwargs={"pk": target.pk})
            else:
                url = reverse(route.name)
            response = getattr(client, method)(url, payload, format="json")
            assert response.status_code != 500, (route.name, response.content)
            writes += 1
    created = GpuRequest.objects.filter(owner=org.dev_a)
    assert not created.filter(approved_by__isnull=False).exists()
    assert not created.filter(team=org.team_b).exists()
    assert _guarded_state() == before
    print(f"\nfield-level: {writes} developer writes with privileged fields, none applied")
    assert writes >= 10


def _all_subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_all_subclasses(sub)}
    return found


def test_no_serializer_or_form_accepts_all_fields() -> None:
    """`fields = "__all__"` or `exclude` would let a new model column become writable unnoticed."""
    import importlib
    import pkgutil

    for app in ("tenants", "scheduling", "accounting", "portal"):
        package = importlib.import_module(app)
        for module in pkgutil.walk_packages(package.__path__, prefix=f"{app}."):
            if ".migrations" not in module.name and ".management" not in module.name:
                importlib.import_module(module.name)
    ours = [
        cls
        for cls in _all_subclasses(serializers.ModelSerializer) | _all_subclasses(ModelForm)
        if cls.__module__.split(".")[0] in ("tenants", "scheduling", "accounting")
    ]
    assert ours, "found no serializers or forms: the introspection is broken"
    for cls in ours:
        meta = getattr(cls, "Meta", None)
        if meta is None:
            continue
        assert getattr(meta, "fields", None) != "__all__", f"{cls.__qualname__} uses __all__"
        assert not hasattr(meta, "exclude"), f"{cls.__qualname__} uses exclude"
    print(f"\nserializers and forms checked: {len(ours)}")


def test_audit_trail_of_another_team_stays_hidden(world: World) -> None:
    """Team B's events exist and A's lead sees none of them, even filtered by B's ids."""
    org = world.org
    assert AuditEvent.objects.filter(team=org.team_b).exists()
    client = api_client(org.lead_a)
    for query in ({}, {"team": org.team_b.pk}, {"actor": "dev_b"}):
        body = client.get(reverse("audit-event-list"), query).json()
        rows = body["results"] if isinstance(body, dict) else body
        assert all(row.get("team") != org.team_b.pk for row in rows), query

"""One declarative API test: declare an endpoint and who may do what; get every check.

    TEAMS = ApiContract(
        basename="team",
        subject=lambda world: world.org.team_a,
        may_read={"admin", "finance", "lead_a", "dev_a"},
        may_create={"admin"},
        may_update={"admin"},
        create_body=lambda world: {"name": "Robotics", "slug": "robotics"},
        update_body={"name": "Renamed"},
    )
    test_team_api_contract = TEAMS.tests()

`subject` is an object of team A. For each persona of `tests.support.personas.Org` and for an
anonymous caller, one test makes every call the router offers on `<basename>-list` and
`<basename>-detail` (and on each of `actions`) and checks the answer:

- anonymous: 401 to everything;
- a persona in `may_read` reads the object (200) and finds it listed; anyone else gets 404 and
  never finds it listed, whatever `list_filters` ask (another tenant's object does not exist);
  `list_refused` personas are refused the list itself (403);
- a write by a persona allowed to make it succeeds (200, 204, 201), changes the rows and is
  audited (an event `<audit>.…` by the caller); a persona who reads the object but may not
  write gets 403, one who cannot read it 404, and the object is unchanged; a method the route
  does not offer is 405;
- a refused create is 403 (or 400 naming the team or project the persona cannot see) and
  creates nothing.

Declaring a contract marks its routes covered for tests/test_cross_tenant_coverage.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pytest
from django.db import models
from django.forms.models import model_to_dict
from django.urls import resolve, reverse

from tenants.models import AuditEvent
from tests.support.cross_tenant import COVERED_ROUTES, result_ids
from tests.support.fleet import Fleet, make_fleet
from tests.support.personas import Org, api_client

ANONYMOUS = "anonymous"
# The error shape's codes for each refusal (tenants/api/errors.py).
REFUSAL_CODES = {
    400: {"invalid"},
    401: {"not_authenticated"},
    403: {"forbidden", "permission_denied"},
    404: {"not_found"},
    405: {"method_not_allowed"},
}
PERSONAS = ("admin", "finance", "lead_a", "dev_a", "lead_b", "dev_b", "nobody", ANONYMOUS)


@dataclass
class World:
    """The org of every test; the demo fleet is seeded the first time a declaration asks."""

    org: Org

    @cached_property
    def fleet(self) -> Fleet:
        return make_fleet(self.org)


Body = Mapping[str, Any] | Callable[[World], Mapping[str, Any]]


@dataclass(frozen=True)
class ApiContract:
    """Who may do what to `subject` (an object of team A's) through the router's `basename`."""

    basename: str
    subject: Callable[[World], models.Model]
    may_read: frozenset[str] | set[str]
    may_create: frozenset[str] | set[str] = frozenset()
    may_update: frozenset[str] | set[str] = frozenset()
    may_delete: frozenset[str] | set[str] = frozenset()
    create_body: Body = field(default_factory=dict)
    update_body: Body = field(default_factory=dict)
    list_refused: frozenset[str] | set[str] = frozenset()
    list_filters: Callable[[World], Iterable[Mapping[str, Any]]] = lambda world: ()
    actions: tuple[str, ...] = ()  # `<basename>-<action>` routes: 404 to non-readers
    audit: str = ""  # allowed writes record an audit event "<audit>.…" by the caller

    def __post_init__(self) -> None:
        for role_set in (self.may_read, self.may_create, self.may_update, self.may_delete):
            unknown = set(role_set) - set(PERSONAS) | (set(role_set) & {ANONYMOUS})
            assert not unknown, f"{self.basename}: unknown personas {unknown}"
        writers = set(self.may_update) | set(self.may_delete)
        assert writers <= set(self.may_read), f"{self.basename}: writers who cannot read"
        COVERED_ROUTES.update(self.routes)

    @property
    def routes(self) -> list[str]:
        return [f"{self.basename}-detail", *(f"{self.basename}-{a}" for a in self.actions)]

    def tests(self) -> Callable[..., None]:
        """The parametrised test, one case per persona; assign it to a `test_…` name."""
        contract = self

        @pytest.mark.django_db
        @pytest.mark.parametrize("persona", PERSONAS)
        def test_api_contract(org: Org, persona: str) -> None:
            check(contract, World(org), persona)

        test_api_contract.__doc__ = f"/{self.basename}/: each persona gets its contracted answers."
        return test_api_contract


def _body(body: Body, world: World) -> dict[str, Any]:
    return dict(body(world) if callable(body) else body)


def _offered(url: str) -> set[str]:
    actions = getattr(resolve(url).func, "actions", None) or {}
    return {method for method in actions if method != "put"}


def _state(obj: models.Model) -> dict[str, Any] | None:
    fresh = type(obj)._default_manager.filter(pk=obj.pk).first()
    return model_to_dict(fresh) if fresh is not None else None


def _count(model: type[models.Model]) -> int:
    return model._default_manager.count()


def _audited(contract: ApiContract, user: Any) -> int:
    return AuditEvent.objects.filter(actor=user, action__startswith=contract.audit).count()


def check(contract: ApiContract, world: World, persona: str) -> None:
    """Every call the routes offer, as `persona`, against the contract (see the module doc)."""
    subject = contract.subject(world)
    model = type(subject)
    user = None if persona == ANONYMOUS else getattr(world.org, persona)
    client = api_client(user)
    list_url = reverse(f"{contract.basename}-list")
    detail_url = reverse(f"{contract.basename}-detail", kwargs={"pk": subject.pk})
    reads = persona in contract.may_read
    where = f"{persona} on {contract.basename} {subject.pk}"

    # 1. Read: the object, and the list with and without filters.
    response = client.get(detail_url)
    expected = 401 if user is None else 200 if reads else 404
    assert response.status_code == expected, f"{where}: GET {response.status_code}"
    if expected == 404:
        assert response.json()["error"]["code"] == "not_found"
    for query in [{}, *([] if reads else contract.list_filters(world))]:
        response = client.get(list_url, query)
        if user is None or persona in contract.list_refused:
            assert response.status_code == (401 if user is None else 403), f"{where}: list"
            break
        assert response.status_code in (200, 400), f"{where}: list?{query} {response.status_code}"
        if response.status_code == 200:
            listed = subject.pk in result_ids(response)
            assert listed == reads, f"{where}: list?{query} lists it: {listed}"

    # 2. Act: each action route, for those who cannot see the object.
    before = _state(subject)
    if not reads:
        for action in contract.actions:
            url = reverse(f"{contract.basename}-{action}", kwargs={"pk": subject.pk})
            for method in _offered(url):
                response = getattr(client, method)(url, {}, format="json")
                status = response.status_code
                assert status == (401 if user is None else 404), f"{where}: {action} {status}"
        assert _state(subject) == before, f"{where}: an action changed it"

    # 3. Update, then delete.
    offered = _offered(detail_url)
    for method, allowed, success in (
        ("patch", contract.may_update, 200),
        ("delete", contract.may_delete, 204),
    ):
        audit_before = _audited(contract, user)
        body = _body(contract.update_body, world) if method == "patch" else {}
        response = getattr(client, method)(detail_url, body, format="json")
        status = response.status_code
        if user is not None and method not in offered:
            assert status == 405, f"{where}: {method.upper()} on a route without it: {status}"
        elif persona in allowed:
            assert status == success, f"{where}: {method.upper()} {status} {response.content!r}"
            after = _state(subject)
            assert after != before, f"{where}: {method.upper()} changed nothing"
            assert _audited(contract, user) > audit_before, f"{where}: {method.upper()} unaudited"
            before = after
            if after is None:
                break  # deleted
            continue
        else:
            expected = 401 if user is None else 403 if reads else 404
            assert status == expected, f"{where}: {method.upper()} {status}, not {expected}"
            assert response.json()["error"]["code"] in REFUSAL_CODES[status], where
        assert _state(subject) == before, f"{where}: a refused {method.upper()} changed it"

    # 4. Create.
    rows, audit_before = _count(model), _audited(contract, user)
    response = client.post(list_url, _body(contract.create_body, world), format="json")
    status = response.status_code
    if user is not None and "post" not in _offered(list_url):
        assert status == 405, f"{where}: POST on a list without it: {status}"
    elif persona in contract.may_create:
        assert status == 201, f"{where}: POST {status} {response.content!r}"
        assert _count(model) == rows + 1
        assert _audited(contract, user) > audit_before, f"{where}: POST unaudited"
    elif user is None:
        assert status == 401, f"{where}: POST {status}"
    else:
        refused = {403} if reads else {403, 400}
        assert status in refused, f"{where}: POST {status}, not {refused}"
        assert response.json()["error"]["code"] in REFUSAL_CODES[status], where
        if status == 400:
            fields = set(response.json()["error"].get("fields") or {})
            assert fields & {"team", "project", "user"}, f"{where}: POST 400 {response.content!r}"
    if persona not in contract.may_create:
        assert _count(model) == rows, f"{where}: a refused POST created a row"

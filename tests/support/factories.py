"""factory_boy factories for the core models.

The catalogue and org factories write rows. A `GpuRequest` is never written raw: the factory
submits it through `submit_gpu_request` and moves it on through the same services and cycle the
product uses, so its status, events and quota standing are real::

    GpuRequestFactory.create(actor=org.dev_a, project=org.project_a, flavor=fleet.l4_12g)
    GpuRequestFactory.create(..., to="queued")   # a lead approves it if the rule did not
    GpuRequestFactory.create(..., to="running")  # and the cycle admits it, the cluster runs it

(`create()` rather than calling the factory: it is typed as returning the model.)

Without arguments every factory builds what it needs, down to a pool with a node and cards,
a quota and an approval rule (`ready_flavor`), so a test that cares about none of it says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from decimal import Decimal
from typing import Any

import factory
from django.contrib.auth import get_user_model
from django.test import TestCase
from django.urls import reverse
from django.utils import timezone
from factory.django import DjangoModelFactory

from accounting.models import Price
from scheduling.choices import (
    SHARING_MODE_OF_FLAVOR_KIND,
    FlavorKind,
    RequestStatus,
    SharingMode,
)
from scheduling.models import (
    Allocation,
    ApprovalRule,
    Flavor,
    GpuDevice,
    GpuRequest,
    Node,
    NodePool,
    Quota,
    ReclaimPolicy,
    Tier,
)
from scheduling.services.requests import GpuRequestSpec, approve_gpu_request, submit_gpu_request
from tenants.choices import ORGANISATION_ROLES, Role
from tenants.models import Membership, Project, Team

IMAGE = "registry.example.com/ml/pytorch:2.4"


class TeamFactory(DjangoModelFactory[Team]):
    class Meta:
        model = Team
        django_get_or_create = ("slug",)

    name = factory.Sequence(lambda n: f"Team {n}")
    slug = factory.Sequence(lambda n: f"team-{n}")


class ProjectFactory(DjangoModelFactory[Project]):
    class Meta:
        model = Project

    team = factory.SubFactory(TeamFactory)
    name = factory.Sequence(lambda n: f"Project {n}")
    slug = factory.Sequence(lambda n: f"project-{n}")


class UserFactory(DjangoModelFactory[Any]):
    """A user whose password is `pw-<username>`; `role=` (and `team=`) gives a membership."""

    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda user: f"{user.username}@example.com")
    password = factory.PostGeneration(
        lambda user, create, extracted, **_: user.set_password(extracted or f"pw-{user.username}")
    )

    @factory.post_generation
    def role(user: Any, create: bool, extracted: str | None, **kwargs: Any) -> None:
        if extracted is not None:
            MembershipFactory.create(user=user, role=extracted, team=kwargs.get("team"))

    @classmethod
    def _after_postgeneration(cls, instance: Any, create: bool, results: Any = None) -> None:
        if create:
            instance.save(update_fields=["password"])


class MembershipFactory(DjangoModelFactory[Membership]):
    """A team role (developer unless said otherwise), or an organisation role with no team."""

    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    role = Role.DEVELOPER
    team = factory.Maybe(
        factory.LazyAttribute(lambda m: m.role in ORGANISATION_ROLES),
        yes_declaration=None,
        no_declaration=factory.SubFactory(TeamFactory),
    )

    class Params:
        lead = factory.Trait(role=Role.TEAM_LEAD)
        finance = factory.Trait(role=Role.FINANCE)
        admin = factory.Trait(role=Role.PLATFORM_ADMIN)


class TierFactory(DjangoModelFactory[Tier]):
    """A tier with an approval rule that approves work within the guaranteed quota at once."""

    class Meta:
        model = Tier
        skip_postgeneration_save = True

    name = factory.Sequence(lambda n: f"Tier {n}")
    slug = factory.Sequence(lambda n: f"tier-{n}")
    max_runtime_seconds = 24 * 3600
    approval_rule = factory.RelatedFactory(
        "tests.support.factories.ApprovalRuleFactory", factory_related_name="tier"
    )

    @factory.post_generation
    def allowed_teams(tier: Tier, create: bool, extracted: Any, **_: Any) -> None:
        if create and extracted:
            tier.allowed_teams.add(*extracted)


class ApprovalRuleFactory(DjangoModelFactory[ApprovalRule]):
    class Meta:
        model = ApprovalRule

    tier = factory.SubFactory(TierFactory, approval_rule=None)
    auto_approve_within_guaranteed = True


class ReclaimPolicyFactory(DjangoModelFactory[ReclaimPolicy]):
    class Meta:
        model = ReclaimPolicy

    tier = factory.SubFactory(TierFactory)


class NodePoolFactory(DjangoModelFactory[NodePool]):
    class Meta:
        model = NodePool

    name = factory.Sequence(lambda n: f"Pool {n}")
    slug = factory.Sequence(lambda n: f"pool-{n}")
    tier = factory.SubFactory(TierFactory)
    sharing_mode = SharingMode.EXCLUSIVE


class NodeFactory(DjangoModelFactory[Node]):
    class Meta:
        model = Node

    pool = factory.SubFactory(NodePoolFactory)
    name = factory.Sequence(lambda n: f"gpu-node-{n}")
    gpu_model = "A100-80G"


class GpuDeviceFactory(DjangoModelFactory[GpuDevice]):
    class Meta:
        model = GpuDevice

    node = factory.SubFactory(NodeFactory)
    index = factory.Sequence(lambda n: n % 8)
    memory_mib = 81920


class FlavorFactory(DjangoModelFactory[Flavor]):
    """A whole-card flavor; `mig` and `vgpu` traits give the other two kinds."""

    class Meta:
        model = Flavor

    name = factory.Sequence(lambda n: f"Flavor {n}")
    slug = factory.Sequence(lambda n: f"flavor-{n}")
    pool = factory.SubFactory(
        NodePoolFactory,
        sharing_mode=factory.LazyAttribute(
            lambda pool: SHARING_MODE_OF_FLAVOR_KIND[pool.factory_parent.kind]
        ),
    )
    kind = FlavorKind.WHOLE
    gpu_model = "A100-80G"
    gpu_memory_mib = 81920
    gpu_equivalent = Decimal(1)

    class Params:
        mig = factory.Trait(
            kind=FlavorKind.MIG,
            mig_profile="1g.10gb",
            gpu_memory_mib=10240,
            gpu_equivalent=Decimal("0.1429"),
        )
        vgpu = factory.Trait(
            kind=FlavorKind.VGPU,
            gpu_model="L4",
            gpu_memory_mib=12288,
            gpu_cores_percent=25,
            gpu_equivalent=Decimal("0.5"),
        )


class QuotaFactory(DjangoModelFactory[Quota]):
    """A team's quota for a flavor (a project's when `project` is given)."""

    class Meta:
        model = Quota

    team = factory.SubFactory(TeamFactory)
    project = None
    flavor = factory.SubFactory(FlavorFactory)
    guaranteed = 4
    limit = 8


class PriceFactory(DjangoModelFactory[Price]):
    """A price that starts in a week: not in effect yet, so it may still change or go."""

    class Meta:
        model = Price

    flavor = factory.SubFactory(FlavorFactory)
    price_per_hour = Decimal("2.5000")
    effective_from = factory.LazyFunction(lambda: timezone.now() + timedelta(days=7))


def ready_flavor(*, team: Team, gpus: int = 8, **flavor_fields: Any) -> Flavor:
    """A whole-card flavor `team` may use: its tier allows the team, its pool has one node with
    `gpus` cards, and the team has a quota of `gpus // 2` guaranteed, `gpus` at most."""
    tier = TierFactory.create(allowed_teams=[team])
    flavor: Flavor = FlavorFactory.create(pool__tier=tier, **flavor_fields)
    node = NodeFactory.create(pool=flavor.pool, gpu_model=flavor.gpu_model)
    for index in range(gpus):
        GpuDeviceFactory.create(node=node, index=index, memory_mib=flavor.gpu_memory_mib)
    QuotaFactory.create(team=team, flavor=flavor, guaranteed=gpus // 2, limit=gpus)
    return flavor


def _team_member(project: Project, role: str) -> Any:
    membership = Membership.objects.filter(team=project.team, role=role).order_by("pk").first()
    if membership is None:
        membership = MembershipFactory.create(team=project.team, role=role)
    return membership.user


# How far a request is moved after its submission; each step goes through the product's code.
STAGES = ("submitted", "queued", "admitted", "launching", "running")


class GpuRequestFactory(factory.Factory[GpuRequest]):
    """A request submitted through `scheduling.services.submit_gpu_request`, by `actor` (by
    default the first developer of the project's team; `make_org`'s team A: `dev_a`).

    `to` says how far it goes from there: "submitted" (as the tier's rule left it: queued, or
    pending a lead), "queued" (the team's first lead approves it if needed), "admitted" (by one
    scheduling cycle), "launching" (the simulated cluster is asked to start it) or "running"
    (the cluster reports it started).
    """

    class Meta:
        model = GpuRequest

    project = factory.SubFactory(ProjectFactory)
    actor = factory.LazyAttribute(lambda o: _team_member(o.project, Role.DEVELOPER))
    flavor = factory.LazyAttribute(lambda o: ready_flavor(team=o.project.team))
    gpu_count = 1
    image = IMAGE
    max_runtime_seconds = 3600
    to = "submitted"

    @classmethod
    def _build(cls, model_class: type[GpuRequest], *args: Any, **kwargs: Any) -> GpuRequest:
        raise TypeError("a GpuRequest is only made through the services: use create()")

    @classmethod
    def _create(cls, model_class: type[GpuRequest], *args: Any, **kwargs: Any) -> GpuRequest:
        to = kwargs.pop("to")
        if to not in STAGES:
            raise ValueError(f"to={to!r}: one of {STAGES}")
        actor = kwargs.pop("actor")
        request = submit_gpu_request(actor=actor, spec=GpuRequestSpec(**kwargs))
        stage = STAGES.index(to)
        if stage >= STAGES.index("queued") and request.status == RequestStatus.PENDING_APPROVAL:
            lead = _team_member(request.project, Role.TEAM_LEAD)
            approve_gpu_request(actor=lead, request=request)
        if stage >= STAGES.index("admitted"):
            admit(request)
        if stage >= STAGES.index("launching"):
            launch(request)
        if stage >= STAGES.index("running"):
            report_running(request)
        request.refresh_from_db()
        return request


def catch_up(request: GpuRequest, to: str) -> None:
    """Take a submitted `request` on to `to` ("admitted", "launching" or "running"), each step
    only if not yet taken: in a transactional test the cycle its submission queued on commit
    may already have taken some."""
    request.refresh_from_db()
    stage = STAGES.index(to)
    if stage >= STAGES.index("admitted") and request.status == RequestStatus.QUEUED:
        admit(request)
    if stage >= STAGES.index("launching") and request.status == RequestStatus.ADMITTED:
        launch(request)
        request.refresh_from_db()
    if stage >= STAGES.index("running") and request.status != RequestStatus.RUNNING:
        report_running(request)
    request.refresh_from_db()
    assert request.status == to, f"{request} is {request.status}, not {to}"


def admit(request: GpuRequest) -> None:
    """One scheduling cycle, which must admit `request`; the launch it queues is not made."""
    from scheduling.services import cycle

    with TestCase.captureOnCommitCallbacks(execute=False):
        result = cycle.run_cycle()
    request.refresh_from_db()
    if request.pk not in result.admitted:
        raise AssertionError(
            f"the cycle left request {request.pk} waiting: {request.waiting_reason}"
        )


def launch(request: GpuRequest) -> None:
    """The launch of the admitted attempt, on the simulated cluster."""
    from runtime.cluster.simulated import SimulatedCluster
    from runtime.services import execution

    request.refresh_from_db()
    backend = SimulatedCluster(speed=1.0)
    execution.launch_request(request_id=request.pk, attempt=request.attempt, backend=backend)


def report_running(request: GpuRequest) -> None:
    """What the workload sync applies when the cluster reports the pod running."""
    from runtime.cluster.base import WorkloadStatus
    from runtime.services import execution

    request.refresh_from_db()
    allocation = Allocation.objects.get(request=request, attempt=request.attempt)
    seen = WorkloadStatus(
        request_id=str(request.pk),
        attempt=request.attempt,
        phase="running",
        namespace=request.project.namespace,
        name=allocation.workload_name,
    )
    assert execution.apply_workload_status(request, seen) == RequestStatus.RUNNING


def api_submit(user: Any, body: Mapping[str, Any], *, status: int | None = 201) -> Any:
    """POST a request (see tests.scheduling.helpers.request_body) to the API as `user`; the
    answer, whose status is checked unless `status` is None."""
    from tests.support.personas import api_client  # personas builds on these factories

    response = api_client(user).post(reverse("gpu-request-list"), body, format="json")
    if status is not None:
        assert response.status_code == status, response.content
    return response

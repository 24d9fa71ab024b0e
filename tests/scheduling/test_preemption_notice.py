"""Preemption with notice: the victim's owner learns who preempted the work, why, and by when
its pods stop; the tier's grace period is the time given; the request page and API show it,
and nothing more of the other team's request."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.test import override_settings
from django.urls import reverse

from runtime.cluster.simulated import SimulatedCluster
from runtime.models import SimulatedWorkload
from runtime.services import execution
from runtime.services.preemption import preempt_request_workload
from scheduling import dispatch
from scheduling.choices import RequestStatus
from scheduling.models import GpuRequest, ReclaimPolicy, Tier
from scheduling.services import cycle
from tenants.models import Notification
from tests.scheduling.conftest import Fleet
from tests.scheduling.test_cycle_preemptions import borrowers_then_owners
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def preempt_two(org: Org, fleet: Fleet, **cycle_args: Any) -> tuple[list[GpuRequest], set[int]]:
    """Team A's borrowers fill the A100s; team B's two requests preempt two of them. Returns
    the victims and the ids of team B's admitted requests."""
    borrowers_then_owners(org, fleet, 2)
    GpuRequest.objects.filter(team=org.team_b).update(name="b-secret-run")
    result = cycle.run_cycle(**cycle_args)
    assert len(result.preempted) == 2
    return list(GpuRequest.objects.filter(pk__in=result.preempted)), set(result.admitted)


def test_a_preemption_records_who_made_room_why_and_the_tier_grace_deadline(
    org: Org, fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    Tier.objects.filter(slug="training").update(preemption_grace_seconds=45)
    with django_capture_on_commit_callbacks(execute=True):
        victims, preemptors = preempt_two(org, fleet)
    for victim in victims:
        assert victim.status == RequestStatus.QUEUED and victim.team == org.team_a
        assert victim.preempted_by_id in preemptors
        assert victim.preemption_reason  # the engine's why
        assert victim.preempted_at is not None
        assert victim.preemption_deadline_at == victim.preempted_at + timedelta(seconds=45)
        notice = Notification.objects.get(
            recipient=victim.owner, event_type="request.preempted", url__endswith=f"/{victim.pk}/"
        )
        assert f"Preempted for request {victim.preempted_by_id} of team Team B: " in notice.body
        assert victim.preemption_reason in notice.body
        assert "45 s to checkpoint" in notice.body and "$PREEMPT_NOTICE" in notice.body
        assert f"{victim.preemption_deadline_at:%Y-%m-%d %H:%M:%S} UTC" in notice.body
        assert "b-secret-run" not in notice.body
    # The same notice by email, to the owner.
    emails = [m for m in mail.outbox if "was preempted" in m.subject]
    assert len(emails) == 2
    assert all(m.to == [org.dev_a.email] and "of team Team B" in m.body for m in emails)


@override_settings(PREEMPTION_GRACE_SECONDS=12)
def test_a_tier_without_its_own_grace_uses_the_setting(org: Org, fleet: Fleet) -> None:
    assert Tier.objects.get(slug="training").preemption_grace_seconds is None
    victims, _ = preempt_two(org, fleet)
    for victim in victims:
        assert victim.preemption_deadline_at is not None and victim.preempted_at is not None
        assert victim.preemption_deadline_at - victim.preempted_at == timedelta(seconds=12)


def launched_borrowers(org: Org, fleet: Fleet, backend: SimulatedCluster) -> list[GpuRequest]:
    """Team A's 16 borrowers, launched on the simulated cluster; then team B asks for two."""
    borrowers = borrowers_then_owners(org, fleet, 0)
    for borrower in borrowers:
        execution.launch_request(request_id=borrower.pk, attempt=1, backend=backend)
    assert SimulatedWorkload.objects.count() == 16
    GpuRequestFactory.create_batch(2, project=org.project_b, flavor=fleet.a100, to="queued")
    return borrowers


def test_the_cycle_stops_the_victims_workloads_after_commit_with_notice(
    org: Org, fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    """The cycle's preemption reaches the cluster through the preempt task (run inline here):
    the simulated cluster's workloads of the victims are gone; the others run on."""
    borrowers = launched_borrowers(org, fleet, SimulatedCluster(speed=1))
    with django_capture_on_commit_callbacks(execute=True):
        result = cycle.run_cycle(on_preempt=dispatch.send_preemption)
    assert len(result.preempted) == 2
    left = set(SimulatedWorkload.objects.values_list("request_key", flat=True))
    assert left == {str(b.pk) for b in borrowers} - {str(pk) for pk in result.preempted}


def test_preempting_a_workload_twice_is_safe_and_records_the_deadline_given(
    org: Org, fleet: Fleet
) -> None:
    backend = SimulatedCluster(speed=1)
    launched_borrowers(org, fleet, backend)
    victim = GpuRequest.objects.get(pk=cycle.run_cycle().preempted[0])
    planned = victim.preemption_deadline_at
    assert planned is not None
    assert preempt_request_workload(request_id=victim.pk, attempt=1, backend=backend) == 1
    victim.refresh_from_db()
    assert victim.preemption_deadline_at is not None
    assert victim.preemption_deadline_at >= planned.replace(microsecond=0)
    assert not SimulatedWorkload.objects.filter(request_key=str(victim.pk)).exists()
    # Again (a retried task): nothing left to tell, nothing fails, the deadline stands.
    given = victim.preemption_deadline_at
    assert preempt_request_workload(request_id=victim.pk, attempt=1, backend=backend) == 0
    victim.refresh_from_db()
    assert victim.preemption_deadline_at == given


def test_the_api_shows_who_preempted_a_request_and_why_but_not_the_other_teams_request(
    org: Org, fleet: Fleet
) -> None:
    victims, _ = preempt_two(org, fleet)
    victim = victims[0]
    client = api_client(org.dev_a)
    body = client.get(f"/api/v1/requests/{victim.pk}/").json()
    assert body["preempted_by"] == {"id": victim.preempted_by_id, "team": "Team B"}
    assert body["preemption_reason"] == victim.preemption_reason
    assert body["preempted_at"] and body["preemption_deadline_at"]
    listed = {r["id"]: r for r in client.get("/api/v1/requests/?page_size=100").json()["results"]}
    assert listed[victim.pk]["preempted_by"] == body["preempted_by"]
    # Team B's request itself stays out of team A's reach.
    assert client.get(f"/api/v1/requests/{victim.preempted_by_id}/").status_code == 404
    # A request never preempted says so.
    other = GpuRequest.objects.filter(team=org.team_a, preempted_at__isnull=True).first()
    assert other is not None
    fresh = client.get(f"/api/v1/requests/{other.pk}/").json()
    assert fresh["preempted_by"] is None and fresh["preemption_reason"] == ""


def test_the_request_page_shows_who_preempted_it_and_why(org: Org, fleet: Fleet) -> None:
    victims, _ = preempt_two(org, fleet)
    victim = victims[0]
    client = api_client(None)
    client.force_login(org.dev_a)
    page = client.get(f"/requests/{victim.pk}/").content.decode()
    assert 'data-testid="preemption"' in page
    assert f"for request {victim.preempted_by_id} of team <strong>Team B</strong>" in page
    assert victim.preemption_reason in page
    assert "b-secret-run" not in page


def test_a_platform_admin_sets_a_tiers_grace_and_a_grace_over_an_hour_is_400(
    org: Org, fleet: Fleet
) -> None:
    tier = Tier.objects.get(slug="training")
    url = reverse("tier-detail", kwargs={"pk": tier.pk})
    client = api_client(org.admin)
    response = client.patch(url, {"preemption_grace_seconds": 120}, format="json")
    assert response.status_code == 200, response.content
    tier.refresh_from_db()
    assert tier.preemption_grace_seconds == 120 and tier.preemption_grace == 120
    response = client.patch(url, {"preemption_grace_seconds": 4000}, format="json")
    assert response.status_code == 400
    assert "preemption_grace_seconds" in response.json()["error"]["fields"]
    # Empty again: the setting applies.
    assert client.patch(url, {"preemption_grace_seconds": None}, format="json").status_code == 200
    tier.refresh_from_db()
    assert tier.preemption_grace == 30
    # A lead may not change it.
    response = api_client(org.lead_a).patch(url, {"preemption_grace_seconds": 1}, format="json")
    assert response.status_code in (403, 404)


def test_work_preempted_on_its_last_attempt_fails_and_its_owner_still_hears_who_and_why(
    org: Org, fleet: Fleet
) -> None:
    ReclaimPolicy.objects.update_or_create(
        tier=Tier.objects.get(slug="training"), defaults={"max_attempts": 1}
    )
    victims, _ = preempt_two(org, fleet)
    for victim in victims:
        assert victim.status == RequestStatus.FAILED
        notice = Notification.objects.get(
            recipient=victim.owner,
            event_type="request.preempted_final",
            url__endswith=f"/{victim.pk}/",
        )
        assert notice.subject == f"GPU request {victim.label} was preempted and not requeued"
        assert f"Preempted for request {victim.preempted_by_id} of team Team B" in notice.body
        assert "not requeued again" in notice.body and "Submit it again" in notice.body
        assert "to checkpoint" in notice.body

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from scheduling.models import GpuRequest, Quota
from tenants.models import Project
from tests.scheduling.conftest import Fleet
from tests.support.cross_tenant import covers
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def login(username: str) -> Client:
    client = Client()
    assert client.login(username=username, password=f"pw-{username}")
    return client


def form_data(org: Org, fleet: Fleet, **overrides: object) -> dict[str, object]:
    data: dict[str, object] = {
        "name": "notebook",
        "project": org.project_a.pk,
        "flavor": fleet.l4_12g.pk,
        "gpu_count": 1,
        "kind": "notebook",
        "image": "jupyter/base-notebook:2024.1",
        "command": "start-notebook.sh --NotebookApp.token=''",
        "env": "MODE=dev\nSEED=1",
        "max_runtime_hours": "2",
        "priority": "normal",
        "allow_shared_node": "on",
        "reason": "exploration",
    }
    data.update(overrides)
    return data


def pending_a100(org: Org, fleet: Fleet) -> GpuRequest:
    return GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, gpu_count=2)


def test_request_form_offers_only_flavors_the_project_may_use(org: Org, fleet: Fleet) -> None:
    page = login("dev_b").get(reverse("gpu-request-new")).content.decode()
    assert "L4 vGPU 12 GiB" in page
    assert "A100 80 GB" not in page  # Speech's team may not use the training tier
    assert "A one" not in page  # another team's project


def test_request_form_submits_and_shows_the_request(org: Org, fleet: Fleet) -> None:
    client = login("dev_a")
    response = client.post(reverse("gpu-request-new"), form_data(org, fleet), follow=True)
    created = GpuRequest.objects.get()
    assert created.command == ["start-notebook.sh", "--NotebookApp.token="]
    assert created.env == {"MODE": "dev", "SEED": "1"}
    assert created.max_runtime_seconds == 7200
    page = response.content.decode()
    assert f"Request {created.pk}" in page and "Queued" in page
    assert "<strong>Submitted</strong>" in page  # the history, in words


def test_request_form_shows_domain_errors_on_the_field(org: Org, fleet: Fleet) -> None:
    response = login("dev_a").post(
        reverse("gpu-request-new"), form_data(org, fleet, gpu_memory_mib=90000)
    )
    assert response.status_code == 200
    assert 'data-testid="error-gpu_memory_mib"' in response.content.decode()
    assert not GpuRequest.objects.exists()


def test_request_form_rejects_malformed_env(org: Org, fleet: Fleet) -> None:
    response = login("dev_a").post(reverse("gpu-request-new"), form_data(org, fleet, env="NOPE"))
    assert 'data-testid="error-env"' in response.content.decode()


def test_estimate_shows_quota_left_and_cost(org: Org, fleet: Fleet) -> None:
    from accounting.demo import seed_demo_prices

    seed_demo_prices()
    response = login("dev_a").get(
        reverse("request-estimate"),
        {"project": org.project_a.pk, "flavor": fleet.l4_12g.pk, "gpu_count": 2},
    )
    page = response.content.decode()
    assert 'data-testid="quota-left-guaranteed">8<' in page
    # 2 x 0.40 for the shares + 2 cores x 0.03 + 8 GiB x 0.004 (the flavor's defaults) = 0.892
    assert '<strong data-testid="cost-per-hour">0.89 EUR</strong>' in page


def test_estimate_for_another_team_project_reveals_nothing(org: Org, fleet: Fleet) -> None:
    response = login("dev_b").get(
        reverse("request-estimate"), {"project": org.project_a.pk, "flavor": fleet.l4_12g.pk}
    )
    assert "Quota left" not in response.content.decode()


def test_flavor_options_follow_the_project(org: Org, fleet: Fleet) -> None:
    client = login("admin")
    options = client.get(reverse("gpu-request-form-flavors"), {"project": org.project_b.pk})
    assert "A100" not in options.content.decode()
    options = client.get(reverse("gpu-request-form-flavors"), {"project": org.project_a.pk})
    assert "A100" in options.content.decode()


@covers("gpu-request-page", "gpu-request-cancel-page", "approval-decide")
def test_other_team_request_pages_are_404(org: Org, fleet: Fleet) -> None:
    request = pending_a100(org, fleet)
    for username in ("dev_b", "lead_b"):
        client = login(username)
        assert client.get(reverse("gpu-request-page", args=[request.pk])).status_code == 404
        assert client.post(reverse("gpu-request-cancel-page", args=[request.pk])).status_code == 404
        url = reverse("approval-decide", args=[request.pk, "approve"])
        assert client.post(url).status_code == 404
        listing = client.get(reverse("gpu-requests-page")).content.decode()
        assert reverse("gpu-request-page", args=[request.pk]) not in listing
    request.refresh_from_db()
    assert request.status == "pending_approval"


def test_lead_approves_from_the_inbox_in_place(org: Org, fleet: Fleet) -> None:
    request = pending_a100(org, fleet)
    client = login("lead_a")
    inbox = client.get(reverse("approvals-page")).content.decode()
    assert f'id="inbox-approval-{request.pk}"' in inbox
    row = client.post(
        reverse("approval-decide", args=[request.pk, "approve"]),
        {"comment": "ok"},
        HTTP_HX_REQUEST="true",
    )
    assert "<html" not in row.content.decode() and "Queued" in row.content.decode()
    request.refresh_from_db()
    assert (request.status, request.approved_by) == ("queued", org.lead_a)
    assert 'data-testid="inbox-empty"' in client.get(reverse("approvals-page")).content.decode()


def test_the_inbox_says_how_long_ago_in_words(org: Org, fleet: Fleet) -> None:
    fresh = pending_a100(org, fleet)
    older = pending_a100(org, fleet)
    now = timezone.now()
    GpuRequest.objects.filter(pk=fresh.pk).update(created_at=now - timedelta(seconds=30))
    GpuRequest.objects.filter(pk=older.pk).update(created_at=now - timedelta(minutes=5, seconds=10))
    inbox = login("lead_a").get(reverse("approvals-page")).content.decode()
    rows = {
        request.pk: inbox.split(f'id="inbox-approval-{request.pk}"')[1].split("</tr>")[0]
        for request in (fresh, older)
    }
    assert "seconds ago" in rows[fresh.pk] and "minutes" not in rows[fresh.pk]
    assert "5\xa0minutes ago" in rows[older.pk]


def test_reject_without_comment_shows_the_error_in_the_row(org: Org, fleet: Fleet) -> None:
    request = pending_a100(org, fleet)
    row = login("lead_a").post(reverse("approval-decide", args=[request.pk, "reject"]))
    assert "Say why" in row.content.decode()
    request.refresh_from_db()
    assert request.status == "pending_approval"


def test_developers_have_no_inbox_or_audit_page(org: Org, fleet: Fleet) -> None:
    client = login("dev_a")
    assert client.get(reverse("approvals-page")).status_code == 404
    assert client.get(reverse("audit-page")).status_code == 404


def test_owner_cancels_from_the_request_page(org: Org, fleet: Fleet) -> None:
    request = pending_a100(org, fleet)
    login("dev_a").post(reverse("gpu-request-cancel-page", args=[request.pk]))
    request.refresh_from_db()
    assert request.status == "cancelled"


@covers("project-quota-set")
def test_lead_splits_quota_on_the_quota_page_but_not_another_team(org: Org, fleet: Fleet) -> None:
    client = login("lead_a")
    page = client.get(reverse("quotas-page")).content.decode()
    assert "A100 80 GB" in page and "Team B" not in page
    url = reverse("project-quota-set", args=[org.project_a.pk, fleet.a100.pk])
    client.post(url, {"guaranteed": 2, "limit": 4})
    assert Quota.objects.get(project=org.project_a, flavor=fleet.a100).limit == 4
    other = reverse("project-quota-set", args=[org.project_b.pk, fleet.l4_6g.pk])
    assert client.post(other, {"guaranteed": 1, "limit": 1}).status_code == 404
    assert not Quota.objects.filter(project=org.project_b).exists()


def test_developer_cannot_split_quota(org: Org, fleet: Fleet) -> None:
    url = reverse("project-quota-set", args=[org.project_a.pk, fleet.a100.pk])
    response = login("dev_a").post(url, {"guaranteed": 1, "limit": 1}, follow=True)
    assert "Only the team lead" in response.content.decode()
    assert not Quota.objects.filter(project=org.project_a).exists()


def test_lead_reads_own_team_audit_log(org: Org, fleet: Fleet) -> None:
    pending_a100(org, fleet)
    page = login("lead_a").get(reverse("audit-page")).content.decode()
    assert "request.submitted" in page
    assert "request.submitted" not in login("lead_b").get(reverse("audit-page")).content.decode()


def test_quota_page_queries_do_not_grow_with_projects_and_it_shows_what_is_in_use(
    org: Org, fleet: Fleet
) -> None:
    client = login("lead_a")
    client.get(reverse("quotas-page"))  # warm the session
    with CaptureQueriesContext(connection) as before:
        client.get(reverse("quotas-page"))
    for number in range(5):
        Project.objects.create(team=org.team_a, slug=f"extra-{number}", name=f"Extra {number}")
    GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_6g, gpu_count=3)
    with CaptureQueriesContext(connection) as after:
        page = client.get(reverse("quotas-page"))

    assert len(after.captured_queries) == len(before.captured_queries)
    row = next(r for r in page.context["rows"] if r.quota.flavor_id == fleet.l4_6g.pk)
    assert row.usage.committed == 3
    assert {s.project.pk: s.usage.committed for s in row.splits}[org.project_a.pk] == 3
    assert len(row.splits) == org.team_a.projects.count()

"""The per-request cost list under the user level of the drill-down: each request with its
GPU-hours and cost, within the reader's reach only."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounting.models import UsageRecord
from accounting.services.metering import meter_usage
from scheduling.models import GpuRequest
from tests.accounting.factories import make_allocation, make_request, set_price
from tests.scheduling.conftest import Fleet
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def login(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def runs(org: Org, fleet: Fleet) -> dict[str, GpuRequest]:
    """This month, at 2.00 an A100-hour: dev A's "sweep" ran 1 h, was preempted and ran 2 h
    more (two attempts, one request); dev A's "eval" ran 1 h on 2 cards; lead A's "probe"
    1 h; dev B's "asr" 4 h."""
    set_price(fleet.a100, "2.00")
    now = timezone.now()
    made: dict[str, GpuRequest] = {}
    for name, project, owner, cards, attempts in (
        ("sweep", org.project_a, org.dev_a, 1, [(5, 4), (3, 1)]),
        ("eval", org.project_a, org.dev_a, 2, [(2, 1)]),
        ("probe", org.project_a, org.lead_a, 1, [(2, 1)]),
        ("asr", org.project_b, org.dev_b, 1, [(5, 1)]),
    ):
        request = make_request(
            project=project, owner=owner, flavor=fleet.a100, gpu_count=cards, name=name
        )
        for started, ended in attempts:
            make_allocation(
                request,
                started_at=now - timedelta(hours=started),
                ended_at=now - timedelta(hours=ended),
            )
        made[name] = request
    meter_usage(now=now)
    return made


def _rows(reader: Any, **params: Any) -> Any:
    return api_client(reader).get(reverse("usage"), {"group_by": "request", **params})


def test_a_users_requests_each_with_gpu_hours_and_cost(
    org: Org, runs: dict[str, GpuRequest]
) -> None:
    body = _rows(org.lead_a, user=org.dev_a.pk).json()
    rows = {row["request_id"]: row for row in body["results"]}
    assert set(rows) == {runs["sweep"].pk, runs["eval"].pk}
    sweep = rows[runs["sweep"].pk]  # two attempts add up to one row
    assert sweep["request"] == f"sweep (#{runs['sweep'].pk})"
    assert Decimal(sweep["gpu_hours"]) == Decimal(3) and Decimal(sweep["cost"]) == Decimal(6)
    assert Decimal(rows[runs["eval"].pk]["gpu_hours"]) == Decimal(2)
    assert Decimal(body["totals"]["cost"]) == Decimal(10)


def test_a_lead_cannot_list_another_teams_requests(org: Org, runs: dict[str, GpuRequest]) -> None:
    for route in ("usage", "chargeback"):
        refused = api_client(org.lead_a).get(
            reverse(route), {"group_by": "request", "user": str(org.dev_b.pk)}
        )
        assert refused.status_code == 400
        assert refused.json()["error"]["fields"]["user"] == "No such user."
    everything = _rows(org.lead_a).json()["results"]
    assert runs["asr"].pk not in {row["request_id"] for row in everything}
    assert {runs["sweep"].pk, runs["eval"].pk, runs["probe"].pk} == {
        row["request_id"] for row in everything
    }
    page = login(org.lead_a).get(
        reverse("reports-page"), {"group_by": "request", "user": str(org.dev_b.pk)}
    )
    assert page.status_code == 400 and "asr" not in page.content.decode()


def test_a_developer_lists_only_their_own_requests(org: Org, runs: dict[str, GpuRequest]) -> None:
    own = {row["request_id"] for row in _rows(org.dev_a).json()["results"]}
    assert own == {runs["sweep"].pk, runs["eval"].pk}  # not the lead's probe
    for other in (org.lead_a, org.dev_b):
        refused = _rows(org.dev_a, user=other.pk)
        assert refused.status_code == 400 and "No such user" in refused.content.decode()
    assert _rows(org.dev_a, user=org.dev_a.pk).status_code == 200
    page = login(org.dev_a).get(reverse("reports-page"), {"group_by": "request"})
    text = page.content.decode()
    assert page.status_code == 200 and "sweep" in text and "probe" not in text


def test_finance_reads_any_users_requests_and_a_bad_user_is_400(
    org: Org, runs: dict[str, GpuRequest]
) -> None:
    rows = api_client(org.finance).get(
        reverse("chargeback"), {"group_by": "request", "user": str(org.dev_b.pk)}
    )
    assert [row["request_id"] for row in rows.json()["results"]] == [runs["asr"].pk]
    assert rows.json()["idle_sharing"] is None  # one user's requests are not the fleet
    for bad in ("0", "abc", str(2**63)):
        assert _rows(org.finance, user=bad).status_code == 400
    assert _rows(org.finance, user=999_999).json()["error"]["fields"]["user"] == "No such user."
    day = _rows(org.finance, group_by="request,day")
    assert day.status_code == 400 and "request" in day.json()["error"]["fields"]["group_by"]


def test_the_drill_down_goes_from_project_to_user_to_their_requests(
    org: Org, runs: dict[str, GpuRequest]
) -> None:
    client = login(org.lead_a)
    users = client.get(
        reverse("reports-page"), {"group_by": "user", "project": str(org.project_a.pk)}
    ).content.decode()
    links = re.findall(r'href="([^"]+)" data-testid="drill-down"', users)
    dev_a = next(link for link in links if f"user={org.dev_a.pk}" in link).replace("&amp;", "&")
    assert "group_by=request" in dev_a
    page = client.get(dev_a).content.decode()
    listed = re.findall(r'data-testid="report-request">([^<]+)<', page)
    assert sorted(listed) == sorted([runs["eval"].label, runs["sweep"].label])
    assert "User: dev_a" in page  # the filter badge names the user
    assert 'data-testid="report-cost">10.00<' in page
    downloads = re.findall(r'href="([^"]+)" data-testid="report-csv"', page)
    assert downloads and f"user={org.dev_a.pk}" in downloads[0]
    assert "group_by=request" in downloads[0]


def test_the_csv_names_the_request_its_team_project_and_the_user_in_the_file_name(
    org: Org, runs: dict[str, GpuRequest]
) -> None:
    response = _rows(org.lead_a, user=org.dev_a.pk, export="csv")
    assert "user-dev_a" in response["Content-Disposition"]
    assert "by-request" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert {row["request"] for row in rows} == {runs["sweep"].label, runs["eval"].label}
    assert {row["team"] for row in rows} == {org.team_a.name}
    assert sum(Decimal(row["cost"]) for row in rows) == Decimal(10)


def test_usage_of_an_allocation_unknown_here_is_one_row_without_a_request(
    org: Org, runs: dict[str, GpuRequest]
) -> None:
    """Billing history outlives the request (or came from another cluster)."""
    asr = runs["asr"]
    records = UsageRecord.objects.filter(allocation__request=asr)
    assert records.exists()
    allocation_ids = list(records.values_list("allocation_id", flat=True))
    asr.allocations.all().delete()
    assert UsageRecord.objects.filter(allocation_id__in=allocation_ids).exists()
    rows = _rows(org.finance, user=org.dev_b.pk).json()["results"]
    assert [(row["request_id"], Decimal(row["cost"])) for row in rows] == [(None, Decimal(8))]
    assert "imported" in rows[0]["request"]


def test_a_request_row_links_to_its_page_only_for_who_may_open_it(
    org: Org, runs: dict[str, GpuRequest]
) -> None:
    params = {"group_by": "request", "user": str(org.dev_a.pk)}
    lead_page = login(org.lead_a).get(reverse("reports-page"), params).content.decode()
    links = set(re.findall(r'href="([^"]+)" data-testid="request-link"', lead_page))
    assert links == {
        reverse("gpu-request-page", args=[runs[name].pk]) for name in ("sweep", "eval")
    }
    for link in links:
        assert login(org.lead_a).get(link).status_code == 200
    finance_page = login(org.finance).get(reverse("reports-page"), params).content.decode()
    assert runs["sweep"].label in finance_page
    opens = login(org.finance).get(reverse("gpu-request-page", args=[runs["sweep"].pk]))
    assert ('data-testid="request-link"' in finance_page) == (opens.status_code == 200)

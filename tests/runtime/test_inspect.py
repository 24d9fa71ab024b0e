"""A request's logs and events through the API and the request page (simulated cluster)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, cast

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.test import AsyncClient, Client
from django.urls import reverse
from django.utils import timezone
from knox.models import AuthToken

from runtime.cluster.simulated import LOG_LINE_SECONDS, SimulatedCluster
from runtime.models import SimulatedWorkload
from runtime.services import execution, inspection, streams
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, GpuRequest
from tests.scheduling.conftest import Fleet
from tests.support.cross_tenant import covers
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def started(request: GpuRequest, *, seconds_ago: float) -> None:
    """Let the simulated workload have started `seconds_ago`."""
    begin = timezone.now() - timedelta(seconds=seconds_ago)
    SimulatedWorkload.objects.filter(request_key=str(request.pk)).update(
        created_at=begin - timedelta(seconds=5), starts_at=begin
    )


def running(org: Org, fleet: Fleet, kind: str = "job", **overrides: Any) -> GpuRequest:
    request = cast(
        GpuRequest,
        GpuRequestFactory(
            to="running", project=org.project_a, flavor=fleet.l4_6g, kind=kind, **overrides
        ),
    )
    SimulatedWorkload.objects.filter(request_key=str(request.pk)).update(
        ends_at=timezone.now() + timedelta(hours=1), fails=False
    )
    return request


def logs_url(request: GpuRequest, **query: Any) -> str:
    url = reverse("gpu-request-logs", kwargs={"pk": request.pk})
    return url + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def test_logs_tail_returns_the_last_lines_as_text(org: Org, fleet: Fleet) -> None:
    request = running(org, fleet)
    started(request, seconds_ago=LOG_LINE_SECONDS * 30)  # about 31 lines so far
    client = api_client(org.dev_a)
    response = client.get(logs_url(request, tail=10))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    lines = response.content.decode().splitlines()
    assert len(lines) == 10 and all(line.startswith("step ") for line in lines)
    everything = client.get(logs_url(request, tail=1000)).content.decode().splitlines()
    assert 30 <= len(everything) <= 32 and everything[-10:] == lines
    assert client.get(logs_url(request, tail="x")).status_code == 400
    # The lead and an admin read it too.
    assert api_client(org.lead_a).get(logs_url(request)).status_code == 200
    assert api_client(org.admin).get(logs_url(request)).status_code == 200


def test_logs_are_empty_before_the_first_launch(org: Org, fleet: Fleet) -> None:
    queued = cast(
        GpuRequest, GpuRequestFactory(to="queued", project=org.project_a, flavor=fleet.l4_6g)
    )
    response = api_client(org.dev_a).get(logs_url(queued))
    assert response.status_code == 200 and response.content == b""


def token_headers(user: Any) -> dict[str, str]:
    _, token = AuthToken.objects.create(user=user)
    return {"Authorization": f"Token {token}"}


async def next_text(stream: AsyncIterator[bytes]) -> str:
    return (await anext(stream)).decode()


def test_follow_streams_new_lines_until_the_work_ends(
    org: Org, fleet: Fleet, settings: Any
) -> None:
    """Through Django's ASGI handler: the stream is an async iterator, read as it comes."""
    settings.WORKLOAD_LOG_POLL_SECONDS = 0.2
    settings.WORKLOAD_LOG_FOLLOW_SECONDS = 5.0
    request = running(org, fleet, kind="notebook")
    started(request, seconds_ago=LOG_LINE_SECONDS * 2)
    headers = token_headers(org.dev_a)

    async def follow() -> float:
        response: Any = await AsyncClient().get(
            logs_url(request, tail=5, follow=1), headers=headers
        )
        assert response.status_code == 200 and response.streaming and response.is_async
        stream = aiter(response.streaming_content)
        first = [await next_text(stream) for _ in range(3)]
        assert first[0].startswith("[I ServerApp] Jupyter Server is running")
        # Five simulated seconds later the notebook wrote one more line.
        await sync_to_async(started)(request, seconds_ago=LOG_LINE_SECONDS * 3 + 0.5)
        assert (await next_text(stream)).startswith("[I ServerApp]")
        # Once the request stops being live the stream ends.
        await GpuRequest.objects.filter(pk=request.pk).aupdate(status=RequestStatus.CANCELLED)
        began = time.monotonic()
        async for _ in stream:
            pass
        return time.monotonic() - began

    assert async_to_sync(follow)() < 2.0  # well before WORKLOAD_LOG_FOLLOW_SECONDS


def test_one_stream_too_many_is_429_with_retry_after_and_a_slot_frees_when_one_ends(
    org: Org, fleet: Fleet, settings: Any
) -> None:
    settings.STREAMS_PER_USER = 2
    settings.WORKLOAD_LOG_POLL_SECONDS = 0.2
    request = running(org, fleet, kind="notebook")
    started(request, seconds_ago=LOG_LINE_SECONDS * 2)
    as_dev, as_lead = token_headers(org.dev_a), token_headers(org.lead_a)
    url = logs_url(request, tail=1, follow=1)
    client = AsyncClient()

    async def scenario() -> None:
        first: Any = await client.get(url, headers=as_dev)
        second: Any = await client.get(url, headers=as_dev)
        assert first.status_code == second.status_code == 200
        refused: Any = await client.get(url, headers=as_dev)
        assert refused.status_code == 429
        assert refused["Retry-After"] == str(streams.SLOT_LEASE_SECONDS)
        error = json.loads(refused.content)["error"]
        assert error["code"] == "too_many_streams" and "2 streams open" in error["message"]
        # Reading without follow is not a stream; other people have slots of their own.
        assert (await client.get(logs_url(request, tail=1), headers=as_dev)).status_code == 200
        assert (await client.get(url, headers=as_lead)).status_code == 200
        # A stream that ends gives its slot back; here the client goes away (the server
        # cancels the response's task while the stream waits for its next poll).
        stream = aiter(first.streaming_content)
        await next_text(stream)
        reader = asyncio.ensure_future(next_text(stream))
        await asyncio.sleep(0.05)
        reader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reader
        assert (await client.get(url, headers=as_dev)).status_code == 200

    async_to_sync(scenario)()


def test_a_slot_whose_holder_died_frees_itself_when_its_lease_runs_out(
    org: Org, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A web process that crashes mid-stream runs no `finally`: only the lease frees its slot."""
    settings.STREAMS_PER_USER = 1
    monkeypatch.setattr(streams, "SLOT_LEASE_SECONDS", 1)
    streams.take_stream_slot(holder=org.dev_a)  # never released
    with pytest.raises(streams.TooManyStreams):
        streams.take_stream_slot(holder=org.dev_a)
    streams.take_stream_slot(holder=org.dev_b)  # the cap is per person
    time.sleep(1.2)
    assert streams.take_stream_slot(holder=org.dev_a).key == streams.slot_key(org.dev_a.pk, 0)


def test_events_merge_the_clusters_and_the_portals_by_time(org: Org, fleet: Fleet) -> None:
    request = running(org, fleet)
    started(request, seconds_ago=30)
    body = api_client(org.dev_a).get(reverse("gpu-request-events", kwargs={"pk": request.pk}))
    assert body.status_code == 200
    data = body.json()
    assert data["cluster_error"] is None
    events = data["results"]
    sources = {e["source"] for e in events}
    assert sources == {"portal", "cluster"}
    reasons = [e["reason"] for e in events]
    assert "request.submitted" in reasons and "Started" in reasons and "Scheduled" in reasons
    assert [e["at"] for e in events] == sorted(e["at"] for e in events)
    scheduled = next(e for e in events if e["reason"] == "Scheduled")
    assert scheduled["object"].startswith(f"Pod/gpr-{request.pk}-a1-")


def test_sync_keeps_pods_exit_code_and_reason_on_the_request(org: Org, fleet: Fleet) -> None:
    request = running(org, fleet)
    SimulatedWorkload.objects.filter(request_key=str(request.pk)).update(
        starts_at=timezone.now() - timedelta(minutes=2),
        ends_at=timezone.now() - timedelta(minutes=1),
        fails=True,
        failure_reason="OOMKilled",
    )
    execution.sync_workloads(backend=SimulatedCluster())
    request.refresh_from_db()
    assert request.status == RequestStatus.FAILED
    allocation = Allocation.objects.get(request=request)
    assert allocation.exit_code == 137
    assert allocation.termination_reason.startswith("OOMKilled")
    body = api_client(org.dev_a).get(reverse("gpu-request-detail", kwargs={"pk": request.pk}))
    data = body.json()
    assert data["exit_code"] == 137 and data["termination_reason"].startswith("OOMKilled")
    assert data["pod_names"] == allocation.pod_names and data["pod_names"][0].startswith("gpr-")
    assert data["node_names"] == [allocation.node_name]
    # The last lines say how it ended.
    text = api_client(org.dev_a).get(logs_url(request, tail=1)).content.decode()
    assert "CUDA out of memory" in text


def test_logs_and_events_go_through_the_worker_for_a_real_cluster(
    org: Org, fleet: Fleet, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With CLUSTER_BACKEND=kubernetes the web never reads the cluster itself: a task does and
    answers through the cache (tasks run inline in the tests)."""
    request = running(org, fleet)
    started(request, seconds_ago=LOG_LINE_SECONDS * 4)
    settings.CLUSTER_BACKEND = "kubernetes"
    asked: list[str] = []
    simulated = SimulatedCluster()

    def backend() -> SimulatedCluster:
        asked.append("backend")
        return simulated

    monkeypatch.setattr(inspection, "cluster_backend", backend)
    client = api_client(org.dev_a)
    text = client.get(logs_url(request, tail=3)).content.decode()
    assert len(text.splitlines()) == 3
    events = client.get(reverse("gpu-request-events", kwargs={"pk": request.pk})).json()
    assert any(e["source"] == "cluster" for e in events["results"])
    assert asked == ["backend", "backend"]


def test_an_unanswered_read_is_503_and_events_still_show_the_portals(
    org: Org, fleet: Fleet, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = running(org, fleet)
    settings.CLUSTER_BACKEND = "kubernetes"
    settings.WORKLOAD_LOG_WAIT_SECONDS = 0.2

    class Silent:  # a queue whose worker never answers
        def signature(self, *args: Any, **kwargs: Any) -> Silent:
            return self

        def apply_async(self, **kwargs: Any) -> None:
            return None

    monkeypatch.setattr(inspection, "current_app", Silent())
    client = api_client(org.dev_a)
    response = client.get(logs_url(request))
    assert response.status_code == 503
    assert "did not answer" in response.content.decode()
    events = client.get(reverse("gpu-request-events", kwargs={"pk": request.pk})).json()
    assert "did not answer" in events["cluster_error"]
    assert {e["source"] for e in events["results"]} == {"portal"}


def test_request_page_shows_the_log_tail_and_events_escaped(org: Org, fleet: Fleet) -> None:
    request = running(org, fleet, kind="notebook")
    started(request, seconds_ago=LOG_LINE_SECONDS * 2)
    client = Client()
    client.force_login(org.dev_a)
    page = client.get(reverse("gpu-request-page", kwargs={"pk": request.pk})).content.decode()
    inspect_url = reverse("gpu-request-inspect-page", kwargs={"pk": request.pk})
    assert f'hx-get="{inspect_url}"' in page and "runtime/logtail.js" in page
    panel = client.get(inspect_url).content.decode()
    assert "Jupyter Server is running" in panel and 'hx-trigger="every 5s"' in panel
    assert "Scheduled" in panel and "request.submitted" in panel


@covers("gpu-request-logs", "gpu-request-events", "gpu-request-inspect-page")
def test_another_tenant_gets_404_on_logs_events_and_the_panel(org: Org, fleet: Fleet) -> None:
    request = running(org, fleet)
    for user in (org.dev_b, org.lead_b):
        client = api_client(user)
        for name in ("gpu-request-logs", "gpu-request-events"):
            url = reverse(name, kwargs={"pk": request.pk})
            assert client.get(url).status_code == 404, (user, name)
            assert client.get(url + "?follow=1").status_code == 404, (user, name)
        page = Client()
        page.force_login(user)
        url = reverse("gpu-request-inspect-page", kwargs={"pk": request.pk})
        assert page.get(url).status_code == 404
    assert api_client(None).get(logs_url(request)).status_code in (401, 403)

"""Preemption with notice on the real control plane: the cycle's preemption, queued as the
worker's task, puts the deadline on the victim's running pod, then deletes it with its tier's
grace period (SIGTERM now, SIGKILL at the deadline), and records the deadline on the request.

kwok has no kubelet: it removes a deleted pod at once with a second, grace-0 delete. The pod's
states are therefore read from a watch replayed from before the preemption, whose first
terminating state is the one the portal's delete made.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from kubernetes import watch

from runtime.cluster.names import PREEMPT_NOTICE_ANNOTATION
from runtime.services import execution
from runtime.services.inventory import apply_inventory
from scheduling import dispatch
from scheduling.choices import RequestStatus
from scheduling.demo import seed_demo_fleet
from scheduling.models import Quota, Tier
from scheduling.services import cycle
from scripts.testbed.cluster import whole_card_node
from tenants.models import Project
from tenants.services.organisation import seed_demo_organisation
from tests.k8s.conftest import Admin
from tests.k8s.test_runtime_fidelity import launch_running_for_an_hour, own_pool, submit, sync_until

pytestmark = [pytest.mark.k8s, pytest.mark.django_db]
NODE = "pn-notice-1"
GRACE_SECONDS = 7


@pytest.fixture(scope="module")
def notice_node(k8s_testbed: Any, k8s_admin: Admin) -> Iterator[None]:
    k8s_testbed.add_nodes([whole_card_node(NODE, pool=NODE, gpus=1)])
    yield
    with contextlib.suppress(Exception):
        k8s_admin.core.delete_node(NODE, _preload_content=False)


@pytest.fixture
def portal(
    k8s_backend: Any,
    k8s_admin: Admin,
    portal_priorities: None,
    notice_node: None,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[dict[str, Any]]:
    """The demo organisation and fleet, a project of its own, and the worker's tasks (run
    inline) talking to the test bed."""
    monkeypatch.setattr(execution, "cluster_backend", lambda: k8s_backend)
    teams = seed_demo_organisation(password="x")
    seed_demo_fleet(teams=teams)
    project = Project.objects.create(
        team=teams["vision"], slug=f"n{uuid.uuid4().hex[:8]}", name="Notice"
    )
    users = get_user_model().objects
    yield {"teams": teams, "project": project, "dev": users.get(username="alice")}
    with contextlib.suppress(Exception):
        k8s_admin.core.delete_namespace(project.namespace, _preload_content=False)


def pod_states(admin: Admin, namespace: str, name: str, since: str) -> list[Any]:
    """Every state of pod `name` from resource version `since` until it is gone (30 s at most)."""
    states: list[Any] = []
    stream = watch.Watch()
    for event in stream.stream(
        admin.core.list_namespaced_pod,
        namespace,
        field_selector=f"metadata.name={name}",
        resource_version=since,
        timeout_seconds=30,
    ):
        states.append(event["object"])
        if event["type"] == "DELETED":
            stream.stop()
    return states


def test_a_preempted_pod_gets_the_deadline_then_its_tiers_grace(
    k8s_backend: Any,
    k8s_admin: Admin,
    portal: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    capture = django_capture_on_commit_callbacks
    flavor = own_pool(portal, NODE, limit=2)
    # Vision runs on capacity borrowed from Speech's idle guarantee, so its work may be preempted.
    Quota.objects.filter(team=portal["teams"]["vision"], flavor=flavor).update(guaranteed=0)
    Quota.objects.create(team=portal["teams"]["speech"], flavor=flavor, guaranteed=2, limit=2)
    Tier.objects.filter(pk=flavor.pool.tier_id).update(preemption_grace_seconds=GRACE_SECONDS)
    apply_inventory(k8s_backend.sync_inventory())
    namespace = portal["project"].namespace

    # Low-priority preemptible work takes the node's one card and runs.
    low = submit(portal, flavor, priority="low", is_preemptible=True)
    with capture(execute=True):
        assert cycle.run_cycle().admitted == [low.pk]
    launch_running_for_an_hour(low, k8s_backend, monkeypatch)
    sync_until(low, k8s_backend, RequestStatus.RUNNING)
    (pod,) = k8s_admin.core.list_namespaced_pod(
        namespace, label_selector=f"gpu-portal/request={low.pk}"
    ).items
    # Launched with the notice's file and the tier's grace as the pod's own.
    assert pod.spec.termination_grace_period_seconds == GRACE_SECONDS
    env = {e.name: e.value for e in pod.spec.containers[0].env}
    assert env["PREEMPT_NOTICE"] == "/etc/gpu-portal/notice/preempt-deadline"
    (volume,) = [v for v in pod.spec.volumes if v.name == "gpu-portal-notice"]
    assert volume.downward_api.items[0].field_ref.field_path == (
        f"metadata.annotations['{PREEMPT_NOTICE_ANNOTATION}']"
    )
    assert PREEMPT_NOTICE_ANNOTATION not in (pod.metadata.annotations or {})
    since = k8s_admin.core.list_namespaced_pod(namespace).metadata.resource_version

    # High-priority work needs the card: the cycle preempts the low one, and its preempt task
    # (the one the worker runs) reaches the cluster after the commit.
    high = submit(portal, flavor, priority="high")
    with capture(execute=True):
        result = cycle.run_cycle(on_preempt=dispatch.send_preemption)
    assert result.preempted == [low.pk] and result.admitted == [high.pk]

    states = pod_states(k8s_admin, namespace, pod.metadata.name, since)
    terminating = [s for s in states if s.metadata.deletion_timestamp]
    assert terminating, "the pod was never deleted"
    first = terminating[0]
    # The notice came before the delete, on a pod that was still running.
    noticed = [s for s in states if PREEMPT_NOTICE_ANNOTATION in (s.metadata.annotations or {})]
    assert noticed and not noticed[0].metadata.deletion_timestamp
    deadline = datetime.fromisoformat(first.metadata.annotations[PREEMPT_NOTICE_ANNOTATION])
    # Deleted with the tier's grace: the API server's deadline is the portal's, give or take
    # the second between the patch and the delete.
    assert first.metadata.deletion_grace_period_seconds == GRACE_SECONDS
    assert abs((first.metadata.deletion_timestamp - deadline).total_seconds()) <= 2

    low.refresh_from_db()
    assert low.status == RequestStatus.QUEUED
    assert low.preempted_by_id == high.pk and low.preemption_reason
    assert low.preemption_deadline_at == deadline
    assert not k8s_admin.batch.list_namespaced_job(
        namespace, label_selector=f"gpu-portal/request={low.pk}"
    ).items
    k8s_backend.terminate(namespace, str(high.pk), 1, reason="t", grace_seconds=0)

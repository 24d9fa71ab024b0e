"""The backend's calls through the real client against a fake API server: idempotent launch,
409 adoption, 404 on terminate, converging project objects, listing and watching."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from runtime.cluster import kubernetes_client, project_manifests
from runtime.cluster import kubernetes_manifests as manifests
from runtime.cluster.base import (
    ClusterBackend,
    LimitRangeSpec,
    PermanentClusterError,
    PrioritySpec,
    TransientClusterError,
    WatchableClusterBackend,
    WorkloadEvent,
)
from runtime.cluster.kubernetes import KubernetesClusterBackend
from tests.cluster import recorded as r
from tests.cluster.fake_api import FakeApiServer
from tests.cluster.specs import NAMESPACE, project, workload

NS_PATH = f"/api/v1/namespaces/{NAMESPACE}"
JOB_PATH = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/gpr-812-a1"
DEPLOYMENT_PATH = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/gpr-812-a1"
SERVICE_PATH = f"{NS_PATH}/services/gpr-812-a1"
QUOTA_PATH = f"{NS_PATH}/resourcequotas/gpu-portal-quota"
LIMITS_PATH = f"{NS_PATH}/limitranges/gpu-portal-limits"
BINDING_PATH = (
    f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/rolebindings/gpu-portal-workloads"
)


def as_json(obj: Any) -> dict[str, Any]:
    return k8s.ApiClient().sanitize_for_serialization(obj)


@pytest.fixture
def server() -> FakeApiServer:
    fake = FakeApiServer()
    fake.put(NS_PATH, project_manifests.namespace_manifest(project()))
    return fake


@pytest.fixture
def backend(server: FakeApiServer) -> KubernetesClusterBackend:
    return KubernetesClusterBackend(api_client=server.api_client())


def test_backend_satisfies_the_protocols(backend: KubernetesClusterBackend) -> None:
    as_protocol: ClusterBackend = backend
    assert isinstance(as_protocol, WatchableClusterBackend)


# Launch -------------------------------------------------------------------------------------


def test_launch_creates_the_job_and_returns_its_name(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    assert backend.launch(workload("job", "mig")) == "gpr-812-a1"
    assert server.urls[-1].startswith("POST /apis/batch/v1/namespaces/gp-vision-detection/jobs?")
    assert "fieldValidation=Strict" in server.urls[-1]
    job = server.objects[JOB_PATH]
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/mig-1g.10gb": "1",
        "cpu": "4",
        "memory": "32Gi",
    }


def test_second_launch_of_the_same_attempt_adopts_and_creates_nothing(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    spec = workload("notebook", "vgpu")
    backend.launch(spec)
    before = {p: o["metadata"]["resourceVersion"] for p, o in server.objects.items()}
    assert backend.launch(spec) == "gpr-812-a1"
    after = {p: o["metadata"]["resourceVersion"] for p, o in server.objects.items()}
    assert after == before
    assert set(server.objects) == {NS_PATH, DEPLOYMENT_PATH, SERVICE_PATH}


def test_launch_retried_after_a_partial_failure_finishes_the_job(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    server.fail("POST", r"/services$", 503, reason="ServiceUnavailable")
    with pytest.raises(TransientClusterError):
        backend.launch(workload("service"))
    assert DEPLOYMENT_PATH in server.objects and SERVICE_PATH not in server.objects
    backend.launch(workload("service"))
    assert SERVICE_PATH in server.objects


def test_launch_refuses_to_adopt_an_object_of_another_attempt(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    foreign = manifests.job_manifest(workload())
    foreign["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "someone-else"
    server.put(JOB_PATH, foreign)
    with pytest.raises(PermanentClusterError, match="does not belong"):
        backend.launch(workload())


def test_launch_refuses_to_adopt_an_object_being_deleted(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    dying = manifests.job_manifest(workload())
    dying["metadata"]["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    server.put(JOB_PATH, dying)
    with pytest.raises(PermanentClusterError, match="being deleted"):
        backend.launch(workload())


def test_launch_reports_an_invalid_object_as_permanent(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    server.fail("POST", r"/jobs$", 422, reason="Invalid", message="spec.template: Invalid value")
    with pytest.raises(PermanentClusterError) as caught:
        backend.launch(workload())
    assert caught.value.status == 422


def test_launch_reports_a_refused_connection_as_transient(
    backend: KubernetesClusterBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(backend.api_client.rest_client, "request", refuse)
    with pytest.raises(TransientClusterError):
        backend.launch(workload())


# Terminate ----------------------------------------------------------------------------------


def test_terminate_deletes_workload_and_pods_and_records_why(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    backend.launch(workload("notebook"))
    server.put(f"{NS_PATH}/pods/gpr-812-a1-7d9f8-abcde", {"metadata": {"labels": r.LABELS}})
    server.put(
        f"{NS_PATH}/pods/other", {"metadata": {"labels": {**r.LABELS, "gpu-portal/attempt": "2"}}}
    )
    backend.terminate(NAMESPACE, "812", 1, reason="idle for 2h", grace_seconds=0)
    deletes = [u for u in server.urls if u.startswith("DELETE")]
    assert all("gracePeriodSeconds=0" in u for u in deletes)
    assert f"DELETE {DEPLOYMENT_PATH}?" in " ".join(deletes)
    assert all("propagationPolicy=Background" in u for u in deletes if "/pods?" not in u)
    assert set(server.objects) == {NS_PATH, f"{NS_PATH}/pods/other"}
    assert ("PATCH", DEPLOYMENT_PATH) in server.calls("PATCH")
    assert ("DELETE", f"{NS_PATH}/pods") in server.calls("DELETE")
    deleted_at = server.calls().index(("DELETE", DEPLOYMENT_PATH))
    assert server.calls().index(("PATCH", DEPLOYMENT_PATH)) < deleted_at, "reason recorded first"


def test_terminate_of_what_is_already_gone_succeeds(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    backend.terminate(NAMESPACE, "812", 1, reason="cancelled", grace_seconds=30)
    backend.terminate(NAMESPACE, "812", 1, reason="cancelled", grace_seconds=30)
    assert set(server.objects) == {NS_PATH}


def test_terminate_passes_on_server_errors(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    backend.launch(workload("job"))
    server.fail("DELETE", r"/jobs/", 500, reason="InternalError")
    with pytest.raises(TransientClusterError):
        backend.terminate(NAMESPACE, "812", 1, reason="cancelled")


# Projects and priority classes --------------------------------------------------------------


def test_ensure_project_creates_namespace_quota_and_limit_range(server: FakeApiServer) -> None:
    empty = FakeApiServer()
    backend = KubernetesClusterBackend(api_client=empty.api_client())
    backend.ensure_project(project())
    policies = f"/apis/networking.k8s.io/v1/namespaces/{NAMESPACE}/networkpolicies"
    assert set(empty.objects) == {
        NS_PATH,
        BINDING_PATH,
        QUOTA_PATH,
        LIMITS_PATH,
        f"{policies}/gpu-portal-default-deny",
        f"{policies}/gpu-portal-allow-gang",
    }
    assert empty.objects[QUOTA_PATH]["spec"]["hard"]["requests.nvidia.com/mig-1g.10gb"] == "4"
    binding = empty.objects[BINDING_PATH]
    assert binding["roleRef"]["name"] == "gpu-portal-workloads"
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": empty.username}
    ]
    writes = len(empty.calls()) - len(empty.calls("GET"))
    backend.ensure_project(project())
    assert len(empty.calls()) - len(empty.calls("GET")) - writes == 6, "only the six creates"
    assert not empty.calls("PUT") and not empty.calls("PATCH")
    # Who the portal is was asked once, of the API server.
    assert [p for _, p in empty.calls("POST") if p.endswith("selfsubjectreviews")] == [
        "/apis/authentication.k8s.io/v1/selfsubjectreviews"
    ]


def test_ensure_project_rebinds_the_role_to_the_portals_current_identity(
    server: FakeApiServer,
) -> None:
    server.put(
        BINDING_PATH,
        project_manifests.workloads_role_binding_manifest(project(), "system:serviceaccount:x:old"),
    )
    KubernetesClusterBackend(
        api_client=server.api_client(), portal_username="system:serviceaccount:gpu:worker"
    ).ensure_project(project())
    assert server.objects[BINDING_PATH]["subjects"][0]["name"] == "system:serviceaccount:gpu:worker"
    assert not [p for _, p in server.calls("POST") if p.endswith("selfsubjectreviews")]


def test_ensure_project_adopts_a_namespace_and_converges_drift(server: FakeApiServer) -> None:
    server.objects[NS_PATH]["metadata"]["labels"] = {"owner": "ops"}
    stale = project_manifests.resource_quota_manifest(project(quota={"requests.nvidia.com/gpu": 2}))
    server.put(QUOTA_PATH, stale)
    server.put(LIMITS_PATH, project_manifests.limit_range_manifest(project()))
    backend = KubernetesClusterBackend(api_client=server.api_client())
    backend.ensure_project(project())
    labels = server.objects[NS_PATH]["metadata"]["labels"]
    assert labels["owner"] == "ops" and labels["gpu-portal/team"] == "vision"
    assert server.objects[QUOTA_PATH]["spec"]["hard"]["requests.nvidia.com/gpu"] == "8"
    assert server.calls("PUT") == [("PUT", QUOTA_PATH)], "the matching limit range is left alone"


def test_adopted_namespace_keeps_the_pod_security_level_an_admin_chose(
    server: FakeApiServer,
) -> None:
    server.objects[NS_PATH]["metadata"]["labels"] = {
        "pod-security.kubernetes.io/enforce": "privileged"
    }
    KubernetesClusterBackend(api_client=server.api_client()).ensure_project(project())
    labels = server.objects[NS_PATH]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["app.kubernetes.io/managed-by"] == "gpu-portal"


def test_ensure_project_treats_equal_quantities_as_equal(server: FakeApiServer) -> None:
    same = project_manifests.resource_quota_manifest(project())
    same["spec"]["hard"]["limits.memory"] = str(512 * 1024**3)
    server.put(QUOTA_PATH, same)
    KubernetesClusterBackend(api_client=server.api_client()).ensure_project(project())
    assert not server.calls("PUT")


def test_ensure_project_removes_the_limit_range_when_there_are_no_defaults(
    server: FakeApiServer,
) -> None:
    server.put(LIMITS_PATH, project_manifests.limit_range_manifest(project()))
    backend = KubernetesClusterBackend(api_client=server.api_client())
    backend.ensure_project(project(limit_range=LimitRangeSpec()))
    assert LIMITS_PATH not in server.objects
    backend.ensure_project(project(limit_range=LimitRangeSpec()))


def test_ensure_project_waits_for_a_terminating_namespace(server: FakeApiServer) -> None:
    server.objects[NS_PATH]["status"] = {"phase": "Terminating"}
    backend = KubernetesClusterBackend(api_client=server.api_client())
    with pytest.raises(TransientClusterError, match="being deleted"):
        backend.ensure_project(project())


def test_concurrent_quota_update_is_a_transient_conflict(server: FakeApiServer) -> None:
    server.put(QUOTA_PATH, project_manifests.resource_quota_manifest(project(quota={"pods": 1})))
    server.fail("PUT", "resourcequotas", 409, reason="Conflict", message="modified")
    backend = KubernetesClusterBackend(api_client=server.api_client())
    with pytest.raises(TransientClusterError):
        backend.ensure_project(project())


HIGH = PrioritySpec(name="gpu-portal-high", value=1000)
PC_PATH = "/apis/scheduling.k8s.io/v1/priorityclasses/gpu-portal-high"


def test_priority_classes_are_created_once(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    backend.ensure_priority_classes([HIGH, PrioritySpec(name="gpu-portal-low", value=10)])
    backend.ensure_priority_classes([HIGH])
    assert server.objects[PC_PATH]["value"] == 1000
    assert not server.calls("DELETE")


def test_priority_class_with_a_changed_value_is_recreated(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    server.put(
        PC_PATH, project_manifests.priority_class_manifest(PrioritySpec("gpu-portal-high", 500))
    )
    backend.ensure_priority_classes([HIGH])
    assert server.objects[PC_PATH]["value"] == 1000
    assert server.calls("DELETE") == [("DELETE", PC_PATH)]


def test_foreign_priority_class_of_the_same_name_is_not_touched(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    foreign = project_manifests.priority_class_manifest(PrioritySpec("gpu-portal-high", 500))
    foreign["metadata"]["labels"] = {}
    server.put(PC_PATH, foreign)
    with pytest.raises(PermanentClusterError, match="not managed by the portal"):
        backend.ensure_priority_classes([HIGH])
    assert server.objects[PC_PATH]["value"] == 500


# Inventory, status and listing ------------------------------------------------------------


def test_sync_inventory_lists_nodes_sorted(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    for name in ("gpu-b", "gpu-a"):
        server.put(
            f"/api/v1/nodes/{name}", as_json(r.node(name, allocatable={"nvidia.com/gpu": "8"}))
        )
    inventory = backend.sync_inventory()
    assert [n.name for n in inventory] == ["gpu-a", "gpu-b"]
    assert inventory[0].gpu_count == 8


def test_list_pages_through_continue_tokens(
    backend: KubernetesClusterBackend, server: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kubernetes_client, "LIST_PAGE_SIZE", 2)
    for i in range(5):
        server.put(f"/api/v1/nodes/n{i}", {"metadata": {"name": f"n{i}"}})
    assert len(backend.sync_inventory()) == 5
    # Three pages of nodes, the DRA driver's slices (none here), then one page of the pods the
    # portal did not create.
    assert [path for _, path in server.calls("GET")] == ["/api/v1/nodes"] * 3 + [
        "/apis/resource.k8s.io/v1/resourceslices",
        "/api/v1/pods",
    ]


def test_list_restarts_once_when_its_continue_token_expires(
    backend: KubernetesClusterBackend, server: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kubernetes_client, "LIST_PAGE_SIZE", 2)
    for i in range(3):
        server.put(f"/api/v1/nodes/n{i}", {"metadata": {"name": f"n{i}"}})
    server.fail("GET", "/nodes", 410, reason="Expired", message="continue parameter is too old")
    serve = server.request
    seen: list[str] = []

    def expire_only_the_second_page(method: str, url: str, **kwargs: Any) -> Any:
        seen.append(url)
        if len(seen) == 1:
            server.faults.clear()  # the first page is served normally...
            response = serve(method, url, **kwargs)
            server.fail("GET", "/nodes", 410, reason="Expired", message="too old")
            return response  # ...and the next request, the second page, expires
        return serve(method, url, **kwargs)

    monkeypatch.setattr(server, "request", expire_only_the_second_page)
    assert sorted(n.name for n in backend.sync_inventory()) == ["n0", "n1", "n2"]
    assert "continue=" in seen[1] and "continue=" not in seen[2], "restarted from the start"


def test_list_workloads_groups_objects_by_request_and_attempt(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    backend.launch(workload("job", request_id="812"))
    backend.launch(workload("notebook", request_id="900", attempt=2))
    running = r.pod(phase="Running", containers=[r.container_status(r.RUNNING, ready=True)])
    server.put(f"{NS_PATH}/pods/gpr-812-a1-x7k2p", as_json(running))
    server.put(f"{NS_PATH}/pods/unlabelled", {"metadata": {"labels": {"app": "x"}}})
    broken = {"metadata": {"labels": {"app.kubernetes.io/managed-by": "gpu-portal"}}}
    server.put(f"{NS_PATH}/pods/broken", broken)
    for statuses in (backend.list_workloads(), backend.list_workloads([NAMESPACE])):
        assert [(s.request_id, s.attempt, s.kind, s.phase) for s in statuses] == [
            ("812", 1, "job", "running"),
            ("900", 2, "notebook", "pending"),
        ]


def test_get_workload_reports_missing_and_found(
    backend: KubernetesClusterBackend, server: FakeApiServer
) -> None:
    assert backend.get_workload(NAMESPACE, "812", 1).phase == "missing"
    backend.launch(workload("job"))
    server.objects[JOB_PATH]["status"] = {
        "conditions": [r.condition("Complete")],
        "completionTime": "2026-12-01T10:45:00Z",
    }
    assert backend.get_workload(NAMESPACE, "812", 1).phase == "succeeded"


# Watch -------------------------------------------------------------------------------------


class ScriptedWatch:
    """Stands in for `kubernetes.watch.Watch`: plays events, then optionally raises."""

    def __init__(self, events: list[dict[str, Any]], error: Exception | None = None) -> None:
        self.events = events
        self.error = error
        self.resource_version: str | None = None
        self.kwargs: dict[str, Any] = {}

    def stream(self, func: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        self.kwargs = kwargs
        for event in self.events:
            if event["type"] == "BOOKMARK":
                self.resource_version = event["object"]["metadata"]["resourceVersion"]
            yield event
        if self.error is not None:
            raise self.error


def _backend_with_watch(server: FakeApiServer, watch: ScriptedWatch) -> KubernetesClusterBackend:
    return KubernetesClusterBackend(api_client=server.api_client(), watch_factory=lambda: watch)


def test_watch_yields_changes_then_resyncs_after_410_gone(server: FakeApiServer) -> None:
    pod = r.pod(phase="Running")
    gone = ApiException(status=410, reason="Expired: too old resource version: 90 (4711)")
    watch = ScriptedWatch(
        [
            {"type": "MODIFIED", "object": pod},
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "4800"}}},
            {"type": "DELETED", "object": pod},
        ],
        error=gone,
    )
    events = list(_backend_with_watch(server, watch).watch_workloads("90"))
    assert events[0] == WorkloadEvent("changed", "4711", NAMESPACE, "812", 1)
    assert events[1] == WorkloadEvent("bookmark", "4800")
    assert events[2].type == "deleted"
    assert events[3].type == "resync" and events[3].resource_version.isdigit()
    assert watch.kwargs["label_selector"] == "app.kubernetes.io/managed-by=gpu-portal"
    assert watch.kwargs["resource_version"] == "90"


def test_watch_without_a_version_asks_for_a_list_first(server: FakeApiServer) -> None:
    events = list(_backend_with_watch(server, ScriptedWatch([])).watch_workloads(None))
    assert [e.type for e in events] == ["resync"]


def test_watch_passes_on_other_errors(server: FakeApiServer) -> None:
    watch = ScriptedWatch([], error=ApiException(status=403, reason="Forbidden"))
    with pytest.raises(PermanentClusterError):
        list(_backend_with_watch(server, watch).watch_workloads("90"))

"""The cluster registry's services: a kubeconfig is checked, sealed and never shown again; the
local cluster takes none and stays; a cluster with pools stays; a request's cluster must fit."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling.models import LOCAL_CLUSTER_SLUG, Cluster, NodePool, local_cluster_id
from scheduling.sealing import unseal
from scheduling.services.clusters import (
    api_server_of,
    check_request_cluster,
    delete_cluster,
    update_cluster,
)
from tenants.errors import ConflictError, DomainError, ForbiddenError
from tenants.models import AuditEvent
from tests.scheduling.conftest import Fleet
from tests.support.clusters import TOKEN, kubeconfig_text, make_cluster
from tests.support.personas import Org

pytestmark = pytest.mark.django_db

BROKEN_KUBECONFIGS = [
    ("", "Give the cluster's kubeconfig."),
    ("clusters: [\n", "not valid YAML"),
    ("- just\n- a list\n", "not a YAML mapping"),
    (kubeconfig_text().replace("current-context: east\n", ""), "no current-context"),
    (kubeconfig_text().replace("current-context: east", "current-context: west"), "'west'"),
    (kubeconfig_text().replace("    user: portal\n", ""), "names no user"),
    (kubeconfig_text().replace("- name: portal\n", "- name: other\n"), "user 'portal'"),
    (kubeconfig_text(server="gpu-east:6443"), "no http(s) server URL"),
    (kubeconfig_text().replace("    server: https://gpu-east.example:6443\n", ""), "server URL"),
]


@pytest.mark.parametrize(("text", "message"), BROKEN_KUBECONFIGS)
def test_a_broken_kubeconfig_is_refused_naming_the_field(text: str, message: str) -> None:
    with pytest.raises(DomainError) as refused:
        api_server_of(text)
    assert message in refused.value.message
    assert set(refused.value.fields) == {"kubeconfig"}
    assert TOKEN not in refused.value.message


def test_the_api_server_is_read_from_the_current_context() -> None:
    assert api_server_of(kubeconfig_text("https://10.0.0.5:6443")) == "https://10.0.0.5:6443"


def test_registering_seals_the_kubeconfig_and_audits_no_secret(org: Org) -> None:
    text = kubeconfig_text()
    cluster = make_cluster(org.admin, scheduler="kueue")
    cluster.refresh_from_db()
    assert cluster.api_server == "https://gpu-east.example:6443"
    assert TOKEN not in cluster.kubeconfig_sealed
    assert unseal(cluster.kubeconfig_sealed)["kubeconfig"] == text
    assert (cluster.is_local, cluster.scheduler_mode) == (False, "kueue")
    event = AuditEvent.objects.get(action="cluster.registered")
    assert TOKEN not in str(event.data) + event.message


def test_only_platform_admins_register_clusters(org: Org) -> None:
    for user in (org.lead_a, org.dev_a, org.finance):
        with pytest.raises(ForbiddenError):
            make_cluster(user)
    assert not Cluster.objects.filter(slug="east").exists()


def test_the_local_slug_is_not_taken_by_a_registered_cluster(org: Org) -> None:
    with pytest.raises(DomainError) as refused:
        make_cluster(org.admin, slug=LOCAL_CLUSTER_SLUG)
    assert "slug" in refused.value.fields


def test_replacing_the_kubeconfig_reseals_it_and_audits_only_the_fact(org: Org) -> None:
    cluster = make_cluster(org.admin)
    new_text = kubeconfig_text("https://gpu-west.example:6443", token="other-token")
    update_cluster(actor=org.admin, cluster=cluster, kubeconfig_text=new_text, is_active=False)
    cluster.refresh_from_db()
    assert unseal(cluster.kubeconfig_sealed)["kubeconfig"] == new_text
    assert (cluster.api_server, cluster.is_active) == ("https://gpu-west.example:6443", False)
    event = AuditEvent.objects.get(action="cluster.updated")
    assert event.data["changes"]["kubeconfig"] == ["(sealed)", "(replaced)"]
    assert "other-token" not in str(event.data)


def test_an_empty_kubeconfig_on_update_keeps_the_old_one(org: Org) -> None:
    cluster = make_cluster(org.admin)
    sealed = cluster.kubeconfig_sealed
    update_cluster(actor=org.admin, cluster=cluster, kubeconfig_text="", name="East 2")
    cluster.refresh_from_db()
    assert (cluster.name, cluster.kubeconfig_sealed) == ("East 2", sealed)


def test_a_broken_replacement_leaves_the_cluster_as_it_was(org: Org) -> None:
    cluster = make_cluster(org.admin)
    with pytest.raises(DomainError):
        update_cluster(actor=org.admin, cluster=cluster, kubeconfig_text="nope: [")
    cluster.refresh_from_db()
    assert cluster.api_server == "https://gpu-east.example:6443"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"kubeconfig_text": kubeconfig_text()}, "kubeconfig"),
        ({"slug": "elsewhere"}, "slug"),
        ({"scheduler": "kueue"}, "scheduler"),
    ],
)
def test_the_local_cluster_takes_no_kubeconfig_nor_other_slug_or_mode(
    org: Org, change: dict[str, Any], field: str
) -> None:
    local = Cluster.objects.get(pk=local_cluster_id())
    with pytest.raises(DomainError) as refused:
        update_cluster(actor=org.admin, cluster=local, **change)
    assert field in refused.value.fields
    local.refresh_from_db()
    assert (local.is_local, local.slug) == (True, LOCAL_CLUSTER_SLUG)


def test_the_local_cluster_may_be_renamed_or_deactivated(org: Org) -> None:
    local = Cluster.objects.get(pk=local_cluster_id())
    update_cluster(actor=org.admin, cluster=local, name="Main", is_active=False)
    local.refresh_from_db()
    assert (local.name, local.is_active, local.is_local) == ("Main", False, True)


def test_the_local_cluster_is_never_deleted(org: Org) -> None:
    local = Cluster.objects.get(pk=local_cluster_id())
    with pytest.raises(ConflictError) as refused:
        delete_cluster(actor=org.admin, cluster=local)
    assert refused.value.code == "cluster_is_local"
    assert Cluster.objects.filter(pk=local.pk).exists()


def test_a_cluster_with_pools_is_not_deleted(org: Org, fleet: Fleet) -> None:
    cluster = make_cluster(org.admin)
    NodePool.objects.filter(pk=fleet.a100.pool_id).update(cluster=cluster)
    with pytest.raises(ConflictError) as refused:
        delete_cluster(actor=org.admin, cluster=cluster)
    assert refused.value.code == "cluster_in_use"
    assert fleet.a100.pool.slug in refused.value.message


def test_an_unused_cluster_is_deleted_and_audited(org: Org) -> None:
    cluster = make_cluster(org.admin)
    delete_cluster(actor=org.admin, cluster=cluster)
    assert not Cluster.objects.filter(slug="east").exists()
    assert AuditEvent.objects.filter(action="cluster.deleted", actor=org.admin).exists()


def test_a_request_may_name_an_active_cluster_holding_one_of_the_flavors_pools(
    org: Org, fleet: Fleet
) -> None:
    east = make_cluster(org.admin)
    other = NodePool.objects.create(
        name="A100 east", slug="a100-east", tier=fleet.a100.pool.tier, cluster=east,
        sharing_mode=fleet.a100.pool.sharing_mode,
    )  # fmt: skip
    with pytest.raises(DomainError) as refused:
        check_request_cluster(flavor=fleet.a100, cluster=east)
    assert "has no pool of" in refused.value.fields["cluster"]
    fleet.a100.other_pools.add(other)
    check_request_cluster(flavor=fleet.a100, cluster=east)
    check_request_cluster(flavor=fleet.a100, cluster=fleet.a100.pool.cluster)
    check_request_cluster(flavor=fleet.a100, cluster=None)
    Cluster.objects.filter(pk=east.pk).update(is_active=False)
    east.refresh_from_db()
    with pytest.raises(DomainError) as refused:
        check_request_cluster(flavor=fleet.a100, cluster=east)
    assert "inactive" in refused.value.fields["cluster"]

"""Deterministic, DNS-1123-valid names for workloads and namespaces."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.cluster.base import (
    MAX_ATTEMPT,
    is_dns_label,
    is_label_value,
    project_namespace,
    workload_name,
)

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
request_ids = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?\Z")
attempts = st.integers(min_value=1, max_value=MAX_ATTEMPT)


def test_workload_name_example() -> None:
    assert workload_name("812", 1) == "gpr-812-a1"


@given(request_ids, attempts)
def test_workload_names_are_valid_for_every_object_kind(request_id: str, attempt: int) -> None:
    name = workload_name(request_id, attempt)
    assert len(name) <= 63
    assert is_dns_label(name)
    assert DNS_1035.match(name), "Services need a DNS-1035 label: it must start with a letter"
    assert is_label_value(request_id)


@given(request_ids, attempts)
def test_workload_names_are_deterministic(request_id: str, attempt: int) -> None:
    assert workload_name(request_id, attempt) == workload_name(request_id, attempt)


@given(request_ids, attempts, request_ids, attempts)
def test_different_attempts_never_share_a_name(a: str, i: int, b: str, j: int) -> None:
    if (a, i) != (b, j):
        assert workload_name(a, i) != workload_name(b, j)


@pytest.mark.parametrize(
    ("request_id", "attempt"),
    [("", 1), ("UPPER", 1), ("-812", 1), ("812-", 1), ("a" * 41, 1), ("812", 0), ("812", 10_000)],
)
def test_workload_name_rejects_ids_that_would_make_invalid_names(
    request_id: str, attempt: int
) -> None:
    with pytest.raises(ValueError):
        workload_name(request_id, attempt)


slugs = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,80}[a-z0-9])?\Z")


@given(slugs, slugs)
def test_project_namespaces_are_dns_labels(team: str, project: str) -> None:
    namespace = project_namespace(team, project)
    assert is_dns_label(namespace)
    assert namespace == project_namespace(team, project)


def test_project_namespace_example() -> None:
    assert project_namespace("vision", "detection") == "gp-vision-detection"

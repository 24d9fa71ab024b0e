"""Registered clusters for tests: a kubeconfig text and a cluster made from it."""

from __future__ import annotations

from typing import Any

from scheduling.models import Cluster
from scheduling.services.clusters import register_cluster
from tenants.scope import Actor

TOKEN = "s3cr3t-token-never-shown"


def kubeconfig_text(server: str = "https://gpu-east.example:6443", *, token: str = TOKEN) -> str:
    """A minimal kubeconfig whose current context points at `server` with a token user."""
    return (
        "apiVersion: v1\n"
        "kind: Config\n"
        "clusters:\n"
        "- name: east\n"
        "  cluster:\n"
        f"    server: {server}\n"
        "    certificate-authority-data: Y2VydA==\n"
        "users:\n"
        "- name: portal\n"
        "  user:\n"
        f"    token: {token}\n"
        "contexts:\n"
        "- name: east\n"
        "  context:\n"
        "    cluster: east\n"
        "    user: portal\n"
        "current-context: east\n"
    )


def make_cluster(actor: Actor, slug: str = "east", **fields: Any) -> Cluster:
    """A registered cluster, by `actor` (a platform admin)."""
    return register_cluster(
        actor=actor,
        name=fields.pop("name", slug.capitalize()),
        slug=slug,
        kubeconfig_text=fields.pop("kubeconfig_text", kubeconfig_text()),
        **fields,
    )

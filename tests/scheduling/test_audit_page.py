"""The audit page names each object as people know it and shows what an edit changed."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from scheduling.services.catalog import update_node_pool
from tenants.models import AuditEvent
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def _client(user: object) -> Client:
    client = Client()
    client.force_login(user)  # type: ignore[arg-type]
    return client


def _rows(html: str) -> list[str]:
    body = html.split('data-testid="audit-table"')[1].split("</table>")[0]
    return body.split('data-testid="audit-row"')[1:]


def test_a_refused_page_view_names_the_user_not_a_lazy_object(org: Org, fleet: Fleet) -> None:
    theirs = GpuRequestFactory.create(project=org.project_b, flavor=fleet.l4_12g)
    url = reverse("gpu-request-page", kwargs={"pk": theirs.pk})
    assert _client(org.dev_a).get(url).status_code == 404
    event = AuditEvent.objects.get(action="access.not_found")
    assert (event.target_type, event.target_id) == ("User", str(org.dev_a.pk))
    page = _client(org.admin).get(reverse("audit-page"), {"action": "access."})
    (row,) = _rows(page.content.decode())
    assert "User dev_a" in row and "lazy" not in row.lower()


def test_an_edit_shows_the_objects_name_and_its_changes_old_to_new(org: Org, fleet: Fleet) -> None:
    pool = fleet.a100.pool
    old_name = pool.name
    update_node_pool(actor=org.admin, node_pool=pool, name="A100 big")
    page = _client(org.admin).get(reverse("audit-page"), {"action": "node_pool.updated"})
    (row,) = _rows(page.content.decode())
    obj = row.split('data-testid="audit-object"')[1].split("</td>")[0]
    assert "Pool A100 big" in obj and f"#{pool.pk}" in obj
    changes = row.split('data-testid="audit-changes"')[1].split("</ul>")[0]
    assert f"{old_name} → A100 big" in changes and "Name:" in changes

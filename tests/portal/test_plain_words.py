"""Pages speak people's words: the demo's people see their teams, projects, pools and flavors by
name, never by slug, and no figure with four decimals, on the pages they use every day, with
the demo a few minutes into its day (work running, queued, waiting for a lead; notices sent).

Left out: the fleet settings (/manage/), where a platform admin edits the slugs themselves, and
the policy replay, which shows a policy's YAML."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from scheduling.choices import RequestStatus
from scheduling.models import Flavor, GpuRequest, NodePool
from tenants.models import Project, Team
from tests.support.demo_work import seed_demo_at_work

pytestmark = pytest.mark.django_db(transaction=True)

PAGES = {
    "alice": ["/", "/requests/", "/requests/new/", "/quotas/", "/reports/", "/notifications/"],
    "bob": ["/", "/requests/", "/approvals/", "/quotas/", "/budgets/", "/notifications/"],
    "carol": ["/", "/requests/", "/notifications/"],
    "dan": ["/", "/approvals/", "/budgets/", "/notifications/"],
    "fiona": ["/", "/reports/", "/budgets/", "/reports/sharing/", "/notifications/"],
    "root": ["/", "/fleet/", "/requests/", "/approvals/", "/quotas/", "/notifications/"],
}
FOUR_DECIMALS = re.compile(r"\d\.\d{4}")
HIDDEN = re.compile(r"<(script|style)\b.*?</\1>", re.S | re.I)
TAG = re.compile(r"<[^>]+>")


def visible_text(html: str) -> str:
    """What the page says: its text without tags, scripts or styles (attributes are not
    read, so links and test ids may carry slugs)."""
    return unescape(TAG.sub(" ", HIDDEN.sub(" ", html)))


def slug_pattern() -> re.Pattern[str]:
    """Any slug of a team, a project path (team/project), a pool or a flavor, standing alone:
    not inside a longer name such as a node's ("a100-training-1")."""
    slugs = {
        *Team.objects.values_list("slug", flat=True),
        *NodePool.objects.values_list("slug", flat=True),
        *Flavor.objects.values_list("slug", flat=True),
        *(
            f"{team}/{project}"
            for team, project in Project.objects.values_list("team__slug", "slug")
        ),
    }
    names = "|".join(re.escape(slug) for slug in sorted(slugs, key=len, reverse=True))
    return re.compile(rf"(?<![\w/-])(?:{names})(?![\w/-])")


@pytest.fixture
def demo_at_work() -> None:
    seed_demo_at_work()


@pytest.mark.parametrize("username", list(PAGES))
def test_pages_name_things_and_round_figures(demo_at_work: None, username: str) -> None:
    client = Client()
    client.force_login(get_user_model().objects.get(username=username))
    waiting = (
        GpuRequest.objects.filter(owner__username="alice", status=RequestStatus.QUEUED)
        .order_by("pk")
        .first()
    )
    assert waiting is not None, "none of alice's work queued: the pages would show too little"
    pages = [*PAGES[username]]
    if username in ("alice", "root"):
        pages.append(f"/requests/{waiting.pk}/")
    slugs = slug_pattern()
    said: list[str] = []
    for path in pages:
        response = client.get(path)
        assert response.status_code == 200, path
        text = visible_text(response.content.decode())
        said += [
            f"{path}: slug {m.group(0)!r} in …{_around(text, m)}…" for m in slugs.finditer(text)
        ]
        said += [
            f"{path}: figure {m.group(0)!r} in …{_around(text, m)}…"
            for m in FOUR_DECIMALS.finditer(text)
        ]
    assert not said, "\n".join(said)


def _around(text: str, match: re.Match[str]) -> str:
    return " ".join(text[max(0, match.start() - 60) : match.end() + 60].split())

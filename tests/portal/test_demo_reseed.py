"""`make run` starts again on any database it made: the demo is seeded once, and what a user
changed since is theirs.

A platform admin and a lead change every kind of demo object through the API and the fleet
settings pages, and delete what may be deleted; then `seed_demo` and the start-up path of
`make run` (`prepare_database`: migrate, seed) run twice each. Nothing may fail, and every
change must still be there: no role taken back, no deleted project, quota or rule made again.
This module runs on the suite's database (PostgreSQL in CI); on PostgreSQL, one test runs it
again in a pytest of its own on a SQLite file, the embedded default's database.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounting.demo import seed_demo_prices
from accounting.models import Price
from portal.management.commands.run_portal import prepare_database
from runtime.models import SimulatedWorkload
from scheduling import demo as fleet_demo
from scheduling.demo import seed_demo_fleet
from scheduling.models import (
    ApprovalRule,
    Flavor,
    GpuDevice,
    Node,
    NodePool,
    ProjectSecret,
    Quota,
    ReclaimPolicy,
    RequestTemplate,
    StorageQuota,
    Tier,
)
from tenants.demo import SEEDED, DemoSeeding
from tenants.models import AuditEvent, Membership, Project, Team
from tenants.services.organisation import seed_demo_organisation
from tests.support.personas import api_client

pytestmark = pytest.mark.django_db

ROOT = Path(django_settings.BASE_DIR)

# What a user may change, as rows: compared before and after the seeding runs.
WATCHED: list[Any] = [
    Team,
    Project,
    Membership,
    Tier,
    ApprovalRule,
    ReclaimPolicy,
    NodePool,
    Node,
    GpuDevice,
    Flavor,
    Quota,
    Price,
    RequestTemplate,
    StorageQuota,
    ProjectSecret,
    SimulatedWorkload,
]


def snapshot() -> dict[str, Any]:
    """Every row a user may have changed, with the tiers' access lists and the users' passwords."""
    rows: dict[str, Any] = {
        model.__name__: sorted(model.objects.values_list(), key=str) for model in WATCHED
    }
    rows["tier access"] = sorted(Tier.allowed_teams.through.objects.values_list("tier", "team"))
    rows["users"] = sorted(
        get_user_model().objects.values_list("username", "password", "is_staff", "is_superuser")
    )
    return rows


def user(name: str) -> Any:
    return get_user_model().objects.get(username=name)


def ok(response: Any) -> Any:
    assert response.status_code in (200, 201, 204, 302), (response.status_code, response.content)
    return response.json() if response.status_code in (200, 201) else None


def change_everything() -> None:
    """What a visitor of the demo may do to it, through the API and the fleet settings pages."""
    root, bob = api_client(user("root")), api_client(user("bob"))
    vision, speech = Team.objects.get(slug="vision"), Team.objects.get(slug="speech")
    detail = "{}-detail".format

    # Roles and memberships: the change that stopped `make run` (one role per user and team).
    alice_in_vision = Membership.objects.get(user__username="alice", team=vision)
    ok(root.patch(reverse(detail("membership"), args=[alice_in_vision.pk]), {"role": "team_lead"}))
    carol = Membership.objects.get(user__username="carol", team=speech)
    ok(root.delete(reverse(detail("membership"), args=[carol.pk])))
    ok(
        root.post(
            reverse("membership-list"), {"user": "carol", "team": vision.pk, "role": "developer"}
        )
    )
    fiona = Membership.objects.get(user__username="fiona", team=None)
    ok(root.delete(reverse(detail("membership"), args=[fiona.pk])))
    ok(
        root.post(
            reverse("membership-list"), {"user": "fiona", "team": None, "role": "platform_admin"}
        )
    )

    # Teams and projects: renamed, re-slugged, deleted.
    ok(
        root.patch(
            reverse(detail("team"), args=[vision.pk]), {"name": "Perception", "slug": "perception"}
        )
    )
    tts = Project.objects.get(team=speech, slug="tts")
    ok(root.delete(reverse(detail("project"), args=[tts.pk])))
    detection = Project.objects.get(team=vision, slug="detection")
    ok(
        bob.patch(
            reverse(detail("project"), args=[detection.pk]), {"name": "Detectors", "slug": "det"}
        )
    )

    # Quotas: changed, deleted; a tier's access list; rules changed and deleted.
    a100 = Flavor.objects.get(slug="a100-80g")
    quota = Quota.objects.get(team=vision, project=None, flavor=a100)
    ok(root.patch(reverse(detail("quota"), args=[quota.pk]), {"guaranteed": 2, "limit": 3}))
    gone = Quota.objects.get(team=speech, project=None, flavor__slug="l4-6g")
    ok(root.delete(reverse(detail("quota"), args=[gone.pk])))
    inference = Tier.objects.get(slug="inference")
    ok(
        root.patch(
            reverse(detail("tier"), args=[inference.pk]), {"allowed_teams": [vision.pk], "rank": 5}
        )
    )
    training_rule = ApprovalRule.objects.get(tier__slug="training")
    ok(
        root.patch(
            reverse(detail("approval-rule"), args=[training_rule.pk]),
            {"lead_approves_whole_cards": False},
        )
    )
    ok(
        root.delete(
            reverse(detail("approval-rule"), args=[ApprovalRule.objects.get(tier__slug="dev").pk])
        )
    )
    dev_policy = ReclaimPolicy.objects.get(tier__slug="dev")
    ok(root.delete(reverse(detail("reclaim-policy"), args=[dev_policy.pk])))
    policy = ReclaimPolicy.objects.get(tier__slug="training")
    ok(root.patch(reverse(detail("reclaim-policy"), args=[policy.pk]), {"max_attempts": 7}))

    # Pools and flavors: a pool renamed and moved to another tier, a flavor retired, one
    # re-slugged, one deleted with its quotas and price.
    pool = NodePool.objects.get(slug="h100-mig")
    ok(
        root.patch(
            reverse(detail("pool"), args=[pool.pk]),
            {"name": "Hopper slices", "slug": "hopper", "tier": "training"},
        )
    )
    l4_6g = Flavor.objects.get(slug="l4-6g")
    ok(root.patch(reverse(detail("flavor"), args=[l4_6g.pk]), {"is_active": False}))
    ok(root.patch(reverse(detail("flavor"), args=[a100.pk]), {"slug": "a100", "name": "A100"}))
    big_slice = Flavor.objects.get(slug="h100-3g40gb")
    Quota.objects.filter(flavor=big_slice).delete()  # what the flavor's 409 asks for first
    Price.objects.filter(flavor=big_slice).delete()
    ok(root.delete(reverse(detail("flavor"), args=[big_slice.pk])))

    # Prices: a new one from next week; the one in effect is kept (the API refuses to rewrite it).
    ok(
        root.post(
            reverse("price-list"),
            {
                "flavor": a100.pk,
                "price_per_hour": "3.1000",
                "effective_from": (timezone.now() + timedelta(days=7)).isoformat(),
            },
        )
    )

    # A lead's template and a project secret.
    template = ok(
        bob.post(
            reverse("request-template-list"),
            {
                "name": "train",
                "team": vision.pk,
                "is_shared": True,
                "flavor": a100.pk,
                "image": "pytorch/pytorch:2.4.0",
            },
        )
    )
    ok(bob.patch(reverse(detail("request-template"), args=[template["id"]]), {"gpu_count": 2}))
    # A seeded template deleted, a seeded storage quota lowered.
    notebook = RequestTemplate.objects.get(team=vision, name="PyTorch notebook")
    ok(bob.delete(reverse(detail("request-template"), args=[notebook.pk])))
    storage = StorageQuota.objects.get(team=speech)
    ok(root.patch(reverse(detail("storage-quota"), args=[storage.pk]), {"limit_gib": 50}))
    ok(
        bob.post(
            reverse("project-secret-list"),
            {"project": detection.pk, "name": "hub", "data": {"TOKEN": "t"}},
        )
    )

    # The fleet settings pages: a team quota set, a team renamed.
    pages = Client()
    pages.force_login(user("root"))
    l4_12g = Flavor.objects.get(slug="l4-12g")
    speech_quota = Quota.objects.get(team=speech, project=None, flavor=l4_12g)
    edit = reverse("manage-quotas-edit", kwargs={"pk": speech_quota.pk})
    ok(pages.post(edit, {"team": speech.pk, "flavor": l4_12g.pk, "guaranteed": "1", "limit": "2"}))
    edit = reverse("manage-teams-edit", kwargs={"pk": speech.pk})
    ok(pages.post(edit, {"name": "Voice", "slug": "voice", "description": "renamed on the page"}))

    # The zombie is reclaimed; a demo user changes their password.
    SimulatedWorkload.objects.all().delete()
    alice = user("alice")
    alice.set_password("alice's own")
    alice.save()


@pytest.fixture
def seeded(settings: Any) -> None:
    settings.DEMO_PASSWORD = "demo-test"
    settings.DEMO_HISTORY_DAYS = 0
    call_command("seed_demo")


def test_every_change_a_user_made_outlives_seed_and_restart(seeded: None) -> None:
    change_everything()
    changed = snapshot()
    assert (
        Membership.objects.get(user__username="alice", team__slug="perception").role == "team_lead"
    )

    for _ in range(2):
        call_command("seed_demo")
        prepare_database()

    assert snapshot() == changed
    assert user("alice").check_password("alice's own")
    assert not Project.objects.filter(slug="tts").exists()
    assert not Team.objects.filter(slug__in=["vision", "speech"]).exists()


def test_a_start_fills_in_what_was_never_seeded(seeded: None, monkeypatch: Any) -> None:
    """A release that adds a demo object: the next start makes it, and only it."""
    Flavor.objects.filter(slug="l4-6g").update(name="mine")
    monkeypatch.setitem(
        fleet_demo.FLAVORS, "l4-3g", ("L4 vGPU 3GiB/10%", "l4-vgpu", "vgpu", 3072, 10, "", "0.125")
    )
    monkeypatch.setitem(fleet_demo.QUOTAS["speech"], "l4-3g", (4, 8))
    before = AuditEvent.objects.filter(action=SEEDED).count()

    call_command("seed_demo")

    assert Flavor.objects.get(slug="l4-3g").pool.slug == "l4-vgpu"
    assert Quota.objects.get(flavor__slug="l4-3g").team.slug == "speech"
    assert Flavor.objects.get(slug="l4-6g").name == "mine"
    latest = AuditEvent.objects.filter(action=SEEDED).first()
    assert latest is not None and sorted(latest.data["objects"]) == [
        "flavor:l4-3g",
        "quota:speech/l4-3g",
    ]
    call_command("seed_demo")
    assert AuditEvent.objects.filter(action=SEEDED).count() == before + 1


def test_a_database_seeded_before_the_record_is_adopted_not_fought(settings: Any) -> None:
    """A database of a release that seeded with no record: what is there is kept as it is."""
    settings.DEMO_HISTORY_DAYS = 0
    unrecorded = DemoSeeding()  # seeds as the releases before the record did: finish() unsaid
    teams = seed_demo_organisation(password="demo", seeding=unrecorded)
    seed_demo_fleet(teams=teams, seeding=unrecorded)
    seed_demo_prices(seeding=unrecorded)
    assert not AuditEvent.objects.filter(action=SEEDED).exists()
    Membership.objects.filter(user__username="alice", team=teams["vision"]).update(role="team_lead")
    Team.objects.filter(slug="vision").update(name="Perception")
    Quota.objects.filter(team=teams["speech"], flavor__slug="l4-6g").delete()
    changed = snapshot()

    prepare_database()
    prepare_database()

    after = snapshot()
    made_again = set(after["Quota"]) - set(changed["Quota"])
    assert len(made_again) == 1  # the first start with the record fills in what is missing
    after["Quota"] = changed["Quota"]
    # Templates and storage quotas came after that release: the first start fills them in.
    assert not changed["RequestTemplate"] and len(after["RequestTemplate"]) == 3
    assert not changed["StorageQuota"] and len(after["StorageQuota"]) == 2
    filled_in = ("SimulatedWorkload", "RequestTemplate", "StorageQuota")
    assert after == {**changed, **{name: after[name] for name in filled_in}}
    assert AuditEvent.objects.filter(action=SEEDED).count() == 1


def test_what_cannot_be_seeded_is_named_and_the_rest_is_seeded(capsys: Any, settings: Any) -> None:
    """A team that took the demo team's name first: the demo says so, and starts."""
    settings.DEMO_HISTORY_DAYS = 0
    Team.objects.create(name="Vision", slug="robots")

    prepare_database()

    assert "could not seed team:vision" in capsys.readouterr().err
    assert not Team.objects.filter(slug="vision").exists()
    assert set(Project.objects.values_list("slug", flat=True)) == {"asr", "tts"}
    assert Membership.objects.filter(user__username="dan", team__slug="speech").exists()
    assert not Membership.objects.filter(user__username="alice").exists()
    assert Quota.objects.filter(team__slug="speech").count() == 4


@pytest.mark.integration
@pytest.mark.timeout(900)
@pytest.mark.skipif(
    connection.vendor == "sqlite", reason="this module already runs on SQLite in this run"
)
def test_the_same_on_the_embedded_defaults_sqlite(tmp_path: Path) -> None:
    """The suite runs on PostgreSQL: run this module again on a SQLite file, as `make run` has."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "PYTEST_ADDOPTS")
    }
    result = subprocess.run(
        [sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider",
         "-k", "not embedded_defaults"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    assert "4 passed" in result.stdout, result.stdout[-2000:]

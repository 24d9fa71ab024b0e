"""The Django admin shows every model to staff and writes none of them: the portal's, and the
users, groups and API tokens that Django and knox register."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import models
from django.test import Client
from django.urls import reverse
from knox.models import AuthToken

from accounting.demo import seed_demo_prices
from scheduling.demo import seed_demo_fleet
from tenants.models import AuditEvent, OidcIdentity
from tenants.services.organisation import seed_demo_organisation
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org, make_user

pytestmark = pytest.mark.django_db


def _admin_models() -> list[type[models.Model]]:
    """Every model the admin site shows, whichever app registered it."""
    return [model for model in apps.get_models() if admin.site.is_registered(model)]


def _superuser_client() -> Client:
    user = make_user("staff")
    user.is_staff = user.is_superuser = True
    user.save()
    client = Client()
    client.force_login(user)
    return client


def _url(model: type[models.Model], view: str, *args: object) -> str:
    meta = model._meta
    return reverse(f"admin:{meta.app_label}_{meta.model_name}_{view}", args=args)


def test_every_model_admin_refuses_add_change_and_delete(org: Org) -> None:
    seed_demo_fleet(teams={"vision": org.team_a, "speech": org.team_b})
    seed_demo_prices()
    GpuRequestFactory(project=org.project_a, actor=org.dev_a)
    AuditEvent.objects.create(action="demo.seeded", target_type="Team")
    Group.objects.create(name="operators")
    AuthToken.objects.create(user=org.dev_a)
    OidcIdentity.objects.create(user=org.dev_a, issuer="https://idp.example", subject="dev-a")
    registered = _admin_models()
    assert len(registered) >= 16, [model.__name__ for model in registered]
    assert {get_user_model(), Group, AuthToken} <= set(registered)
    client = _superuser_client()
    for model in registered:
        name = model.__name__
        assert client.get(_url(model, "changelist")).status_code == 200, name
        assert client.get(_url(model, "add")).status_code == 403, name
        obj = model._default_manager.order_by("pk").first()
        assert obj is not None, f"no {name} to open"
        change = _url(model, "change", obj.pk)
        page = client.get(change)
        assert page.status_code == 200, name  # a view page, no form to save
        assert 'name="_save"' not in page.content.decode(), name
        assert client.post(change, {}).status_code == 403, name
        assert client.post(_url(model, "delete", obj.pk), {"post": "yes"}).status_code == 403
        assert model._default_manager.filter(pk=obj.pk).exists(), name
    # Nor through the user's own pages: the password form is a change too.
    password = reverse("admin:auth_user_password_change", args=[org.dev_a.pk])
    assert (
        client.post(password, {"password1": "x-Y-z-123!", "password2": "x-Y-z-123!"}).status_code
        == 403
    )
    org.dev_a.refresh_from_db()
    assert not org.dev_a.check_password("x-Y-z-123!")


def test_demo_root_opens_the_admin_from_the_navigation(org: Org) -> None:
    seed_demo_organisation(password="demo-pw")
    client = Client()
    assert client.login(username="root", password="demo-pw")
    home = client.get(reverse("home")).content.decode()
    assert reverse("admin:index") in home
    assert client.get(reverse("admin:index")).status_code == 200
    alice = Client()
    assert alice.login(username="alice", password="demo-pw")
    assert reverse("admin:index") not in alice.get(reverse("home")).content.decode()

"""The navigation: the links each role may follow, the current page marked for screen readers."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def page_for(user: User, url: str) -> str:
    client = Client()
    client.force_login(user)
    return client.get(url).content.decode()


def test_the_current_page_is_marked_in_the_nav(org: Org) -> None:
    page = page_for(org.dev_a, reverse("gpu-requests-page"))
    requests = reverse("gpu-requests-page")
    assert f'<a class="nav-link active" href="{requests}" aria-current="page">Requests</a>' in page
    assert page.count('aria-current="page"') == 1


def test_reports_are_in_the_nav_of_members_and_finance_not_of_outsiders(org: Org) -> None:
    reports = f'href="{reverse("reports-page")}"'
    assert reports in page_for(org.dev_a, reverse("api-tokens"))
    assert reports in page_for(org.finance, reverse("api-tokens"))
    assert reports not in page_for(org.nobody, reverse("api-tokens"))


def test_the_role_reads_as_words(org: Org) -> None:
    assert "lead_a · Team lead" in page_for(org.lead_a, reverse("api-tokens"))

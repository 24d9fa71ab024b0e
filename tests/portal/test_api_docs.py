"""The API documentation page: Swagger UI from the installed sidecar package, in a page of our
own that says its language, names its parts and loads the colours and names that make it
readable (checked in the browser by tests/browser/test_accessibility_walk.py)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def test_the_api_docs_page_is_in_english_and_loads_our_accessibility_fixes(org: Org) -> None:
    client = Client()
    client.force_login(org.dev_a)

    page = client.get(reverse("api-docs")).content.decode()

    assert page.startswith('<!doctype html>\n<html lang="en">')
    assert "<title>API documentation · GPU Portal</title>" in page
    assert "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in page
    assert "portal/api_docs.css" in page
    assert "portal/api_docs.js" in page
    script = client.get(reverse("api-docs"), {"script": ""})
    assert script.status_code == 200
    assert '"deepLinking": false' in script.content.decode()

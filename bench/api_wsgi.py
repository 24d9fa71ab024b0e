"""The WSGI application of the API load benchmark: the product plus its reference endpoints.

The references (a stock DRF viewset over the same rows and the floor create, `bench.api_urls`)
are mounted here only, by pointing ROOT_URLCONF at the benchmark's URL conf before the first
request; the product's URL conf and its schema never contain them. (A settings module that
star-imports `portal.settings` cannot be used: importing `portal` loads the Celery app, which
reads settings.)
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402

django.setup()
settings.ROOT_URLCONF = "bench.api_urls"
application = get_wsgi_application()

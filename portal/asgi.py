"""ASGI entry point: what gunicorn's uvicorn workers serve (`portal/gunicorn_config.py`).

Pages and API calls are sync views that Django runs in a thread per request; a long-lived
response (a followed log) is an async iterator that waits on the event loop, so it occupies no
worker and no thread while it waits.
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

application = get_asgi_application()

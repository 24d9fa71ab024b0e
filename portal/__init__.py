"""GPU Portal: the Django project wiring (settings, urls, Celery app, UI shell)."""

from portal.celery import app as celery_app

__all__ = ["celery_app"]

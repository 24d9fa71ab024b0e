"""How the web tier runs: `gunicorn -c python:portal.gunicorn_config` (docs/operations.md).

Django's ASGI application (`portal.asgi`) in uvicorn's gunicorn worker. Gunicorn keeps the
processes (`--workers`, or WEB_CONCURRENCY; restarts, graceful reloads); each runs one event
loop. Pages, the API and the workload auth check are sync views that Django runs in a thread
per request; a followed log waits on the loop between its polls and occupies no worker, so
followers do not stall the pages (`bench/streams.py`: 50 followers, page p99 unchanged).
`make run`, the image, compose and the manifests all start the web tier with this file; they
add only `--bind`, `--workers` (and the image `--worker-tmp-dir`).
"""

from __future__ import annotations

wsgi_app = "portal.asgi:application"
worker_class = "uvicorn_worker.UvicornWorker"
accesslog = "-"
# A deploy or Ctrl-C cuts open streams after this long; their clients ask again.
graceful_timeout = 10
# gunicornc's control socket is not used; without it no file is written outside /tmp.
control_socket_disable = True

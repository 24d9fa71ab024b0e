"""The web tier as deployed, for tests: the application a gunicorn command serves."""

from __future__ import annotations

import importlib
from typing import Any


def gunicorn_app(command: list[str]) -> Any:
    """The application a gunicorn command serves, read from its config module
    (`--config python:portal.gunicorn_config`, as `-c X` or `--config=X`)."""
    config = next(
        arg.removeprefix("--config=") if arg.startswith("--config=") else command[index + 1]
        for index, arg in enumerate(command)
        if arg.startswith("--config=") or arg in ("-c", "--config")
    )
    assert config.startswith("python:"), command
    module = importlib.import_module(config.removeprefix("python:"))
    app_module, _, attribute = module.wsgi_app.partition(":")
    return getattr(importlib.import_module(app_module), attribute)

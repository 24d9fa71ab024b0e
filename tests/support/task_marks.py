"""Marks which tasks a test worker is running, so a test can tell what a SIGKILL interrupted.

Loaded into the worker processes that `tests/support/worker.py` starts (`celery worker --include`).
Each task that starts writes an empty file `<task name>@<task id>` into TASK_MARKS_DIR and removes
it when it ends (whatever its outcome). A SIGKILL leaves the files of the tasks it cut short.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from celery.signals import task_postrun, task_prerun


def _mark(task_id: str | None, task: Any) -> Path | None:
    directory = os.environ.get("TASK_MARKS_DIR")
    if not directory or task_id is None:
        return None
    return Path(directory) / f"{getattr(task, 'name', task)}@{task_id}"


@task_prerun.connect
def _task_started(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    if mark := _mark(task_id, task):
        mark.touch()


@task_postrun.connect
def _task_ended(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    if mark := _mark(task_id, task):
        with contextlib.suppress(FileNotFoundError):
            mark.unlink()

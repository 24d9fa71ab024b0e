"""What the demo seeds once: every demo object under a key that the user's edits do not change.

The demo's seeders (organisation, fleet, prices, the simulated cluster's zombie) make each object
through `DemoSeeding.once(key, ...)`. The first start makes it and records its key with its
primary key in a `demo.seeded` audit event; a later start finds the record and leaves the object
as the user left it: renamed, with another role or quota, retired, or deleted (then it stays
deleted). Only a key never recorded is made, so a release that adds a demo object fills it in on
the next start. A database from before this record adopts what it has by its natural key (a
team's slug, a user's name) and fills in the rest.

An object that cannot be made (a unique name the user took meanwhile, a rule the database
refuses) is skipped in its own savepoint with "could not seed <key>: <reason>", and the rest is
seeded: the portal starts anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from django.core.exceptions import ValidationError
from django.db import DatabaseError, models, transaction

from tenants.errors import DomainError
from tenants.models import AuditEvent

SEEDED = "demo.seeded"
logger = logging.getLogger(__name__)

M = TypeVar("M", bound=models.Model)


class DemoSeeding:
    """The record of what the demo seeded, read once; `finish()` appends what this run made."""

    def __init__(self) -> None:
        self.before: dict[str, Any] = {}
        for data in AuditEvent.objects.filter(action=SEEDED).values_list("data", flat=True):
            self.before.update(data.get("objects", {}))
        self.made: dict[str, Any] = {}
        self.problems: list[str] = []

    def once(self, key: str, model: type[M], make: Callable[[], M]) -> M | None:
        """The object seeded under `key`: made by `make()` the first time, afterwards as the user
        left it; None when the user deleted it or it could not be made."""
        if key in self.made or key in self.before:
            return self.seeded(key, model)
        try:
            with transaction.atomic():
                made = make()
        except (DatabaseError, DomainError, ValidationError) as error:
            self.could_not(key, _reason(error))
            return None
        self.made[key] = made.pk
        return made

    def get_or_create(
        self, key: str, model: type[M], *, defaults: dict[str, Any], **lookup: Any
    ) -> M | None:
        """`once()`, making the object with `get_or_create(**lookup, defaults=defaults)`: a
        database from before the record keeps what it has under `lookup`."""
        return self.once(
            key, model, lambda: _objects(model).get_or_create(defaults=defaults, **lookup)[0]
        )

    def seeded(self, key: str, model: type[M]) -> M | None:
        """The object seeded under `key` if it is still there; None when it was never seeded."""
        pk = self.made.get(key, self.before.get(key))
        return None if pk is None else _objects(model).filter(pk=pk).first()

    def could_not(self, key: str, reason: str) -> None:
        """Say that `key` was not seeded, unless it was seeded before (the user's to change)."""
        if key in self.before:
            return
        problem = f"could not seed {key}: {reason}"
        logger.warning(problem)
        self.problems.append(problem)

    def finish(self) -> None:
        """Record what this run made, so that no later start makes it again."""
        if self.made:
            AuditEvent.objects.create(
                action=SEEDED,
                target_type="Demo",
                message=f"The demo seeded {len(self.made)} objects.",
                data={"objects": self.made},
            )
            self.before.update(self.made)
            self.made = {}


def _objects(model: type[M]) -> models.QuerySet[M]:
    return models.QuerySet(model)


def _reason(error: Exception) -> str:
    if isinstance(error, ValidationError):
        return "; ".join(error.messages)
    if isinstance(error, DomainError):
        return error.message
    return str(error).splitlines()[0] if str(error) else type(error).__name__

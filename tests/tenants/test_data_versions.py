"""Version stamps: every change renews them at once, and a transaction renews all of its
changes together once it has committed."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import cache
from django.db import transaction

from tenants.data_versions import ALL_TEAMS, changed, stamp_key

pytestmark = pytest.mark.django_db

KIND = "test-data"
KEYS = [stamp_key(KIND, team) for team in (1, 2, ALL_TEAMS)]


def stamps() -> dict[str, Any]:
    return cache.get_many(KEYS)


def test_every_change_renews_its_stamps_at_once() -> None:
    changed(KIND, [1])
    first = stamps()
    changed(KIND, [1])
    second = stamps()
    assert first[KEYS[0]] != second[KEYS[0]]
    assert first[KEYS[2]] != second[KEYS[2]]


def test_the_changes_of_a_transaction_are_renewed_together_after_commit(
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks() as callbacks:
        changed(KIND, [1])
        changed(KIND, [2])
        changed(KIND, [1])
    assert len(callbacks) == 1
    before_commit = stamps()
    assert set(before_commit) == set(KEYS)

    callbacks[0]()
    after_commit = stamps()
    assert all(after_commit[key] != before_commit[key] for key in KEYS)


def test_a_rolled_back_savepoint_does_not_take_later_changes_with_it(
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks() as callbacks:
        with pytest.raises(RuntimeError), transaction.atomic():
            changed(KIND, [1])
            raise RuntimeError("rolled back")
        changed(KIND, [2])
    assert len(callbacks) == 1
    before_commit = stamps()
    callbacks[0]()
    after_commit = stamps()
    assert after_commit[KEYS[1]] != before_commit[KEYS[1]]
    assert after_commit[KEYS[2]] != before_commit[KEYS[2]]

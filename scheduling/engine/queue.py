"""Queue order: priority class, then dominant-resource fair share between teams, then age.

With the default order ("priority", "fair_share", "age"):

1. Requests are grouped by priority; higher classes are fully served first.
2. Within a class each team has its own age-ordered (submitted_at, id) line.
3. The next request comes from the team with the lowest weighted dominant share (DRF: the
   largest share the team holds of any one resource, divided by its weight), ties broken by the
   age of the team's oldest request, then team name.  Shares are re-read after every decision,
   so a team that just got capacity drops back and the others catch up.

Without "fair_share" the order is a static sort on the listed keys; `id` always breaks ties.
A heap of teams keyed by share makes each pop O(log teams).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable

from .types import QueueKey, Request


class FairQueue:
    """Yields pending requests in policy order; `touch` re-keys a team whose share changed."""

    def __init__(
        self,
        requests: Iterable[Request],
        order: tuple[QueueKey, ...],
        share: Callable[[str], float],
    ) -> None:
        self._share = share
        reqs = sorted(requests, key=lambda r: r.id)
        use_priority = "priority" in order
        self._fair = "fair_share" in order
        use_age = "age" in order
        if not self._fair:

            def static_key(r: Request) -> tuple[float, float, str]:
                return (
                    -r.priority if use_priority else 0,
                    r.submitted_at if use_age else 0.0,
                    r.id,
                )

            self._flat: deque[Request] = deque(sorted(reqs, key=static_key))
            self._levels: list[dict[str, deque[Request]]] = []
        else:
            self._flat = deque()
            by_level: dict[int, dict[str, list[Request]]] = {}
            for r in reqs:
                lvl = r.priority if use_priority else 0
                by_level.setdefault(lvl, {}).setdefault(r.team, []).append(r)
            self._levels = []
            for lvl in sorted(by_level, reverse=True):
                teams = by_level[lvl]
                self._levels.append(
                    {
                        t: deque(
                            sorted(
                                teams[t],
                                key=lambda r: (r.submitted_at if use_age else 0.0, r.id),
                            )
                        )
                        for t in sorted(teams)
                    }
                )
        self._level = -1
        self._heap: list[tuple[float, float, str, int]] = []
        self._version: dict[str, int] = {}
        self._last_team: str | None = None

    def _push(self, team: str) -> None:
        line = self._levels[self._level].get(team)
        if not line:
            return
        v = self._version.get(team, 0) + 1
        self._version[team] = v
        heapq.heappush(self._heap, (self._share(team), line[0].submitted_at, team, v))

    def _next_level(self) -> bool:
        self._level += 1
        if self._level >= len(self._levels):
            return False
        self._heap = []
        self._version = {}
        for team in self._levels[self._level]:
            self._push(team)
        return True

    def pop(self) -> Request | None:
        """The next request, or None when the queue is exhausted."""
        if not self._fair:
            return self._flat.popleft() if self._flat else None
        last = self._last_team
        if last is not None:
            self._last_team = None
            line = self._levels[self._level].get(last)
            if line:
                # Fast path: if the last team still sorts before the heap's top, serve it again
                # without a push/pop (same result: keys differ at least by team name).
                key = (self._share(last), line[0].submitted_at, last)
                if not self._heap or key < self._heap[0][:3]:
                    self._last_team = last
                    return line.popleft()
                self._push(last)  # its share may have changed with the last decision
        while True:
            if self._level < 0 or not self._heap:
                if not self._next_level():
                    return None
                continue
            _, _, team, v = heapq.heappop(self._heap)
            if self._version.get(team) != v:
                continue
            line = self._levels[self._level][team]
            req = line.popleft()
            self._last_team = team
            return req

    def touch(self, team: str) -> None:
        """Re-key `team` after its share changed outside its own turn (e.g. it lost a victim)."""
        if self._fair and 0 <= self._level < len(self._levels) and team != self._last_team:
            self._push(team)

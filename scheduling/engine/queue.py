"""Queue order: aged priority class, then dominant-resource fair share between teams and between
the members of a team, then age.

With the default order ("priority", "fair_share", "age"):

1. Requests are grouped by their aged priority (`aged_priority`): the class they asked for,
   raised one class for every `Policy.priority_aging_seconds` they have waited in the queue, up
   to CRITICAL.  Higher classes are fully served first.  Aging only orders the queue: a request
   preempts with the class it asked for.
2. Within a class each team has its own line.  Inside a team's line, with
   `Policy.fair_share_in_team`, each member has an age-ordered (submitted_at, id) line, and the
   team's next request comes from the member with the lowest weighted dominant share (the
   largest share the member holds of any one GPU model, divided by the member's weight), ties
   broken by the age of the member's oldest request, then the member's name.  Without it the
   team's line is simply age-ordered.
3. The next request comes from the team with the lowest weighted dominant share (DRF: the
   largest share the team holds of any one resource, divided by its weight), ties broken by the
   age of the team's next request, then team name.  Shares are re-read after every decision,
   so a team (or member) that just got capacity drops back and the others catch up.

Without "fair_share" the order is a static sort on the listed keys; `id` always breaks ties.
A heap of teams keyed by share makes each pop O(log teams); choosing a member costs
O(members of the team with waiting work).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence

from .types import Priority, QueueKey, Request


def aged_priority(request: Request, now: float, aging_seconds: float) -> int:
    """The queue priority of `request` at `now`: its class raised one step per `aging_seconds`
    waited (0: no aging), never above CRITICAL unless it asked for more."""
    if aging_seconds <= 0:
        return request.priority
    waited = max(0.0, now - request.waiting_since())
    top = max(int(Priority.CRITICAL), request.priority)
    return min(top, request.priority + int(waited // aging_seconds))


def dominant_share(
    use: Mapping[str, float] | None, capacity: Mapping[str, float], weight: float
) -> float:
    """Weighted dominant share: the largest used/capacity over GPU models, over `weight`."""
    if not use:
        return 0.0
    return max((use[m] / capacity[m] for m in use if capacity.get(m)), default=0.0) / weight


def _age(r: Request) -> tuple[float, str]:
    return (r.submitted_at, r.id)


def _id_only(r: Request) -> tuple[float, str]:
    return (0.0, r.id)


class TeamLine:
    """One team's waiting requests at one priority level: one age-ordered line per member, the
    next request from the member with the lowest share (or plain age order without shares)."""

    def __init__(
        self,
        team: str,
        requests: list[Request],
        member_share: Callable[[str, str], float] | None,
        age: Callable[[Request], tuple[float, str]] = _age,
    ) -> None:
        self.team = team
        self._member_share = member_share
        self._age = age
        lines: dict[str, list[Request]] = {}
        for r in requests:
            lines.setdefault(r.owner if member_share is not None else "", []).append(r)
        self._lines = {m: deque(sorted(rs, key=age)) for m, rs in sorted(lines.items())}

    def __bool__(self) -> bool:
        return bool(self._lines)

    def first(self, member: str) -> Request:
        return self._lines[member][0]

    def next_member(self) -> str:
        """The member whose request comes next."""
        if len(self._lines) == 1 or self._member_share is None:
            return next(iter(self._lines))
        share = self._member_share
        team = self.team
        age = self._age
        return min(self._lines, key=lambda m: (share(team, m), age(self._lines[m][0]), m))

    def head(self) -> Request:
        """The request this line would give next (the line must not be empty)."""
        return self._lines[self.next_member()][0]

    def popleft(self, member: str | None = None) -> Request:
        """Take the next request (of `member`, when the caller has just chosen it)."""
        if member is None:
            member = self.next_member()
        line = self._lines[member]
        req = line.popleft()
        if not line:
            del self._lines[member]
        return req


class FairQueue:
    """Yields pending requests in policy order; `touch` re-keys a team whose share changed."""

    def __init__(
        self,
        requests: Iterable[Request],
        order: tuple[QueueKey, ...],
        share: Callable[[str], float],
        member_share: Callable[[str, str], float] | None = None,
        now: float = 0.0,
        aging_seconds: float = 0.0,
    ) -> None:
        self._share = share
        reqs = list(requests)  # every order below ends in the request id: the input order is moot
        use_priority = "priority" in order
        self._fair = "fair_share" in order
        use_age = "age" in order

        def level(r: Request) -> int:
            return aged_priority(r, now, aging_seconds) if use_priority else 0

        if not self._fair:

            def static_key(r: Request) -> tuple[float, float, str]:
                return (-level(r), r.submitted_at if use_age else 0.0, r.id)

            self._flat: deque[Request] = deque(sorted(reqs, key=static_key))
            self._levels: list[dict[str, TeamLine]] = []
        else:
            age = _age if use_age else _id_only
            self._flat = deque()
            by_level: dict[int, dict[str, list[Request]]] = {}
            for r in reqs:
                by_level.setdefault(level(r), {}).setdefault(r.team, []).append(r)
            self._levels = [
                {t: TeamLine(t, teams[t], member_share, age) for t in sorted(teams)}
                for _, teams in sorted(by_level.items(), reverse=True)
            ]
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
        heapq.heappush(self._heap, (self._share(team), line.head().submitted_at, team, v))

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
                member = line.next_member()
                key = (self._share(last), line.first(member).submitted_at, last)
                if not self._heap or key < self._heap[0][:3]:
                    self._last_team = last
                    return line.popleft(member)
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


def split_by_order(
    pending: Sequence[Request],
    default: tuple[QueueKey, ...],
    pool_orders: Iterable[tuple[str, tuple[QueueKey, ...]]],
    pools_of: Callable[[Request], list[str]],
) -> list[tuple[tuple[QueueKey, ...], list[Request]]]:
    """Pending requests split by the queue order that applies to them.

    A request whose eligible pools (`pools_of`) all carry the same override in `pool_orders`
    is queued with that order; everything else uses `default`.  The default queue runs first,
    then the overrides, each at the first name of the pools carrying it: an order fixed by the
    policy, whichever requests wait.
    """
    overrides = dict(pool_orders)
    if not overrides:
        return [(default, list(pending))]
    first_pool: dict[tuple[QueueKey, ...], str] = {}
    for pool, override in sorted(overrides.items(), reverse=True):
        first_pool[override] = pool
    rest: list[Request] = []
    by_order: dict[tuple[QueueKey, ...], list[Request]] = {}
    for req in pending:
        orders = {overrides.get(p) for p in pools_of(req)}
        if len(orders) == 1 and (order := orders.pop()) is not None:
            by_order.setdefault(order, []).append(req)
        else:
            rest.append(req)
    ordered = sorted(by_order, key=lambda o: (first_pool[o], o))
    return [(default, rest)] + [(o, by_order[o]) for o in ordered]

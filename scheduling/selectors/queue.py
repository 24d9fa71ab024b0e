"""Where queued requests stand: the position a page shows, counted from the stored ranks."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection

from scheduling.choices import RequestStatus
from scheduling.models import GpuRequest


def fill_queue_positions(requests: Iterable[GpuRequest]) -> None:
    """Set `queue_position` on each queued request of `requests`: 1 + the queued requests the
    last cycle ranked before it, or None if no cycle has ranked it yet. One query.

    Positions are derived rather than stored so that a cycle does not rewrite every row behind
    an admission (scheduling/services/queue_ranks.py); other statuses keep their stored value
    (Kueue's position of a request it holds).
    """
    queued = [request for request in requests if request.status == RequestStatus.QUEUED]
    ranks = sorted({request.queue_rank for request in queued if request.queue_rank is not None})
    position_of = queue_positions(ranks)
    for request in queued:
        rank = request.queue_rank
        request.queue_position = None if rank is None else position_of.get(rank)


def queue_positions(ranks: list[int]) -> dict[int, int]:
    """The position of each rank of `ranks` among the queued requests' ranks, in one pass over
    the partial index of queued ranks up to the largest one."""
    if not ranks:
        return {}
    meta = GpuRequest._meta
    table = connection.ops.quote_name(meta.db_table)
    rank = connection.ops.quote_name(meta.get_field("queue_rank").column)
    status = connection.ops.quote_name(meta.get_field("status").column)
    wanted = ", ".join(["%s"] * len(ranks))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT ranked.r, ranked.position FROM ("  # noqa: S608 - model names
            f"SELECT {rank} AS r, ROW_NUMBER() OVER (ORDER BY {rank}) AS position FROM {table} "
            f"WHERE {status} = %s AND {rank} IS NOT NULL AND {rank} <= %s"
            f") AS ranked WHERE ranked.r IN ({wanted})",
            [RequestStatus.QUEUED, ranks[-1], *ranks],
        )
        return {int(r): int(position) for r, position in cursor.fetchall()}

"""Reads for the fleet page's node notes: nodes held back by inventory's access check, and
nodes where pods the portal did not create hold GPUs."""

from __future__ import annotations

from django.db.models import Q, QuerySet

from scheduling.models import Node


def nodes_needing_attention() -> QuerySet[Node]:
    """Held-back nodes first, then nodes shared with foreign GPU pods, by pool and name."""
    return (
        Node.objects.filter(~Q(held_back_reason="") | ~Q(foreign_usage={}))
        .select_related("pool")
        .only("name", "pool__name", "held_back_reason", "foreign_usage", "is_schedulable")
        .order_by("-held_back_reason", "pool__name", "name")
    )

"""Key rotation for the values sealed at rest (scheduling/sealing.py): every project secret and
every registered cluster's kubeconfig, re-sealed with the current key."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction

from scheduling.models import Cluster, ProjectSecret
from scheduling.sealing import SealError, reseal
from tenants.services.organisation import record_audit_event


@dataclass(slots=True)
class ResealOutcome:
    """How many values were re-sealed, and which no configured key opens."""

    resealed: int = 0
    unreadable: list[str] = field(default_factory=list)


@transaction.atomic
def reseal_stored_values() -> ResealOutcome:
    """Re-seal every stored value with the first of `SECRET_SEALING_KEYS`; safe to repeat.

    A value no key opens is left as it is and named in the outcome (its owner enters it again).
    """
    outcome = ResealOutcome()
    stores = (
        (ProjectSecret.objects.exclude(sealed_data=""), "sealed_data", "project secret"),
        (Cluster.objects.exclude(kubeconfig_sealed=""), "kubeconfig_sealed", "cluster"),
    )
    for queryset, column, label in stores:
        for pk, token in queryset.select_for_update().values_list("pk", column):
            try:
                fresh = reseal(token)
            except SealError:
                outcome.unreadable.append(f"{label} {pk}")
                continue
            queryset.model.objects.filter(pk=pk).update(**{column: fresh})
            outcome.resealed += 1
    record_audit_event(
        actor=None,
        action="secrets.resealed",
        target=ProjectSecret(),
        message=f"{outcome.resealed} sealed values re-sealed with the current key",
        data={"resealed": outcome.resealed, "unreadable": outcome.unreadable},
    )
    return outcome

"""Quotas: a team's share of a flavor, and the part of it each of its projects holds."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q

from scheduling.models.catalog import Flavor
from tenants.models import Project, ScopedQuerySet, Team
from tenants.scope import Scope


class QuotaQuerySet(ScopedQuerySet):
    def for_scope(self, scope: Scope) -> QuotaQuerySet:
        if scope.is_platform_admin:
            return self.all()
        return self.filter(team_id__in=scope.team_ids)


class Quota(models.Model):
    """A team's or a project's share of one flavor: guaranteed, and a limit reached by borrowing.

    A row without a project is the team's quota; a row with one is the project's part of it.
    Amounts count units of the flavor (cards, shares or slices).
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="quotas")
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="quotas", null=True, blank=True
    )
    flavor = models.ForeignKey(Flavor, on_delete=models.CASCADE, related_name="quotas")
    guaranteed = models.PositiveIntegerField(default=0)
    limit = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    objects = QuotaQuerySet.as_manager()

    class Meta:
        ordering = ["team__name", "project__name", "flavor__name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(guaranteed__lte=F("limit")),
                name="quota_guaranteed_within_limit",
                violation_error_message="The guaranteed amount cannot exceed the limit.",
            ),
            models.UniqueConstraint(
                fields=["team", "flavor"],
                condition=Q(project__isnull=True),
                name="quota_one_per_team_flavor",
                violation_error_message="The team already has a quota for this flavor.",
            ),
            models.UniqueConstraint(
                fields=["project", "flavor"],
                condition=Q(project__isnull=False),
                name="quota_one_per_project_flavor",
                violation_error_message="The project already has a quota for this flavor.",
            ),
        ]

    def __str__(self) -> str:
        owner = self.project or self.team
        return f"{owner} {self.flavor}: {self.guaranteed}/{self.limit}"

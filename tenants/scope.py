"""Who a user is in the organisation: the facts every `visible_to()` and permission reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User

#: Who calls a service: the user of a page or an API call (on a page, Django's lazy proxy of
#: one; anonymous where a view lets visitors in). Services refuse what its `Scope` does not allow.
Actor: TypeAlias = "User | AnonymousUser"


@dataclass(frozen=True, slots=True)
class Scope:
    """A user's roles, resolved once per request."""

    user_id: int | None
    is_platform_admin: bool
    is_finance: bool
    team_ids: frozenset[int]
    lead_team_ids: frozenset[int]

    @property
    def sees_all_tenants(self) -> bool:
        return self.is_platform_admin or self.is_finance

    def is_lead_of(self, team_id: int) -> bool:
        return self.is_platform_admin or team_id in self.lead_team_ids

    def is_member_of(self, team_id: int) -> bool:
        return team_id in self.team_ids


ANONYMOUS = Scope(None, False, False, frozenset(), frozenset())

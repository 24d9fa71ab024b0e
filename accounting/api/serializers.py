"""Query parameters of the usage and chargeback reports."""

from __future__ import annotations

from datetime import date
from typing import Any

from rest_framework import serializers

from accounting.selectors import GROUP_KEYS, UsageQuery, current_month

MAX_ID = 2**63 - 1


def _parse_month(value: str) -> date:
    return date(int(value[:4]), int(value[5:7]), 1)


class UsageQuerySerializer(serializers.Serializer):
    """`month` (YYYY-MM, default this billing month), `months` back from it, ids, `group_by`."""

    month = serializers.RegexField(
        r"^\d{4}-(0[1-9]|1[0-2])$",
        required=False,
        error_messages={"invalid": "Use YYYY-MM, e.g. 2026-12."},
    )
    months = serializers.IntegerField(min_value=1, max_value=36, required=False, default=1)
    team = serializers.IntegerField(min_value=1, max_value=MAX_ID, required=False)
    project = serializers.IntegerField(min_value=1, max_value=MAX_ID, required=False)
    pool = serializers.IntegerField(min_value=1, max_value=MAX_ID, required=False)
    flavor = serializers.IntegerField(min_value=1, max_value=MAX_ID, required=False)
    group_by = serializers.CharField(required=False)
    export = serializers.ChoiceField(choices=["csv", "xlsx"], required=False)

    default_group_by: tuple[str, ...] = ("team",)

    def validate_month(self, value: str) -> str:
        if not 2000 <= int(value[:4]) <= 9000:
            raise serializers.ValidationError("Use a year between 2000 and 9000.")
        return value

    def validate_group_by(self, value: str) -> tuple[str, ...]:
        keys = tuple(key.strip() for key in value.split(",") if key.strip())
        unknown = [key for key in keys if key not in GROUP_KEYS]
        if unknown:
            allowed = ", ".join(GROUP_KEYS)
            raise serializers.ValidationError(f"Unknown key {unknown[0]!r}; use {allowed}.")
        if len(set(keys)) != len(keys):
            raise serializers.ValidationError("A key appears twice.")
        return keys

    def to_query(self) -> UsageQuery:
        data: dict[str, Any] = self.validated_data
        month_to = _parse_month(data["month"]) if data.get("month") else current_month()
        month_from = month_to
        for _ in range(data["months"] - 1):
            month_from = (
                date(month_from.year - 1, 12, 1)
                if month_from.month == 1
                else month_from.replace(month=month_from.month - 1)
            )
        return UsageQuery(
            month_from=month_from,
            month_to=month_to,
            team_id=data.get("team"),
            project_id=data.get("project"),
            pool_id=data.get("pool"),
            flavor_id=data.get("flavor"),
            group_by=data.get("group_by") or self.default_group_by,
        )


class ChargebackQuerySerializer(UsageQuerySerializer):
    default_group_by = ("team", "flavor")

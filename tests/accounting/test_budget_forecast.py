"""A month-end forecast beside each budget: spent so far + the current daily burn (the mean of
the last seven days of the month) × the days left."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounting.choices import BudgetUnit
from accounting.models import Budget
from accounting.periods import billing_zone, month_bounds
from accounting.selectors.budgets import burn_window, forecast_of, with_burn
from accounting.selectors.usage import current_month
from accounting.services.metering import meter_usage
from tests.accounting.factories import make_allocation, make_request, set_price
from tests.scheduling.conftest import Fleet
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 6, 11, 12, tzinfo=UTC)  # June has 30 days: 19.5 days left


def _ran(org: Org, fleet: Fleet, start: datetime, end: datetime) -> None:
    request = make_request(project=org.project_a, owner=org.dev_a, flavor=fleet.a100)
    make_allocation(request, started_at=start, ended_at=end)


@pytest.fixture
def june(org: Org, fleet: Fleet, settings: Any) -> None:
    """At 2.00 an hour: 48 h on the 1st-2nd (before the burn window) and 84 h from the 8th to
    now (inside it: the window is the 5th 00:00 to the 11th 12:00, 6.5 days)."""
    settings.BILLING_TIME_ZONE = "UTC"
    set_price(fleet.a100, "2.00")
    _ran(org, fleet, datetime(2026, 6, 1, tzinfo=UTC), datetime(2026, 6, 3, tzinfo=UTC))
    _ran(org, fleet, datetime(2026, 6, 8, tzinfo=UTC), NOW)
    meter_usage(now=NOW)


def _forecast(budget: Budget, now: datetime = NOW) -> Any:
    return forecast_of(with_burn(Budget.objects.filter(pk=budget.pk), now=now).get(), now=now)


def test_forecast_is_spent_plus_recent_daily_burn_times_days_left(org: Org, june: None) -> None:
    money = Budget.objects.create(team=org.team_a, unit=BudgetUnit.MONEY, amount=Decimal(1000))
    forecast = _forecast(money)
    assert forecast.spent == Decimal("264.00")  # 132 h × 2.00
    assert forecast.burn_days == Decimal("6.5") and forecast.days_left == Decimal("19.5")
    assert forecast.daily_burn == Decimal("25.85")  # 168 / 6.5
    assert forecast.amount == Decimal("768.00")  # 264 + 168 / 6.5 × 19.5
    assert forecast.percent == Decimal("76.8")
    assert "spent so far 264.00 + 25.85 a day" in forecast.explanation
    assert "19.5 days left" in forecast.explanation


def test_a_project_budget_in_gpu_hours_forecasts_its_own_hours(org: Org, june: None) -> None:
    hours = Budget.objects.create(
        team=org.team_a, project=org.project_a, unit=BudgetUnit.GPU_HOURS, amount=Decimal(300)
    )
    forecast = _forecast(hours)
    assert forecast.spent == Decimal("132.00") and forecast.amount == Decimal("384.00")
    assert forecast.percent == Decimal("128.0")  # heading past its budget
    other = Budget.objects.create(
        team=org.team_a, project=org.project_a2, unit=BudgetUnit.GPU_HOURS, amount=Decimal(10)
    )
    assert _forecast(other).amount == 0  # nothing ran in the other project


def test_early_in_the_month_the_window_starts_at_the_month(settings: Any) -> None:
    settings.BILLING_TIME_ZONE = "UTC"
    window = burn_window(datetime(2026, 6, 2, 12, tzinfo=UTC))
    assert window.since.isoformat() == "2026-06-01"
    assert window.days == Decimal("1.5") and window.days_left == Decimal("28.5")


def test_the_window_follows_the_billing_time_zone(settings: Any) -> None:
    settings.BILLING_TIME_ZONE = "Europe/Berlin"  # UTC+2 in June
    window = burn_window(datetime(2026, 6, 30, 23, 0, tzinfo=UTC))  # July 1st 01:00 in Berlin
    assert window.since.isoformat() == "2026-07-01"
    assert window.days == Decimal(1) / 24 and window.days_left == Decimal(30) + Decimal(23) / 24


# The API and the page ---------------------------------------------------------------------------


@pytest.fixture
def this_month(org: Org, fleet: Fleet) -> tuple[Budget, Budget]:
    set_price(fleet.a100, "2.00")
    now = timezone.now().replace(microsecond=0)
    month_start = month_bounds(current_month(now), billing_zone())[0]
    # 3 h, all in this billing month (a test run in a month's first hours gets less)
    _ran(org, fleet, max(now - timedelta(hours=3), month_start), now)
    meter_usage(now=now)
    mine = Budget.objects.create(team=org.team_a, unit=BudgetUnit.MONEY, amount=Decimal(100))
    theirs = Budget.objects.create(team=org.team_b, unit=BudgetUnit.MONEY, amount=Decimal(100))
    return mine, theirs


def test_the_api_gives_each_budget_its_forecast(
    org: Org, this_month: tuple[Budget, Budget]
) -> None:
    mine, _ = this_month
    body = api_client(org.lead_a).get(reverse("budget-detail", kwargs={"pk": mine.pk})).json()
    forecast = body["forecast"]
    assert set(forecast) == {
        "amount",
        "percent",
        "spent",
        "daily_burn",
        "burn_days",
        "days_left",
        "explanation",
    }
    spent = Decimal(forecast["spent"])
    assert Decimal(0) < spent <= Decimal("6.00")
    assert Decimal(forecast["amount"]) >= spent
    assert forecast["explanation"].startswith(f"spent so far {spent} + ")


def test_another_teams_budget_and_its_forecast_stay_hidden(
    org: Org, this_month: tuple[Budget, Budget]
) -> None:
    mine, theirs = this_month
    client = api_client(org.lead_a)
    assert client.get(reverse("budget-detail", kwargs={"pk": theirs.pk})).status_code == 404
    listed = client.get(reverse("budget-list")).json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert [row["id"] for row in rows] == [mine.pk]
    page = Client()
    page.force_login(org.lead_a)
    text = page.get(reverse("budgets-page")).content.decode()
    assert text.count('data-testid="budget-forecast"') == 1


def test_the_budgets_page_shows_the_forecast_and_how_it_is_made(
    org: Org, this_month: tuple[Budget, Budget]
) -> None:
    client = Client()
    client.force_login(org.finance)
    text = client.get(reverse("budgets-page")).content.decode()
    assert "Month-end forecast" in text
    assert text.count('data-testid="budget-forecast"') == 2
    assert "spent so far " in text and " a day (the mean of the last " in text
    assert "days left" in text

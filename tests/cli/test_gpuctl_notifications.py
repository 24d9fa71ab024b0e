"""`gpuctl notifications show|set` against a live portal: one's own settings only, changed by
plain flags, bad input refused in one line with nothing changed."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from click.testing import CliRunner

from gpuctl.cli import cli
from gpuctl.notifications import SettingError, TopicSwitch, changes, parse_topic
from tenants.choices import NotificationTopic
from tenants.models import NotificationSettings
from tenants.services.notification_settings import update_notification_settings
from tests.cli.conftest import Gpuctl
from tests.support.personas import Org

pytestmark = pytest.mark.integration

SLACK = "https://hooks.slack.com/services/T000/B000/XXXX"
TOPICS = list(NotificationTopic.values)


def rows_of(stdout: str) -> dict[str, list[str]]:
    """The topic table's rows by topic: [in_app, email, webhook]."""
    lines = stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("TOPIC"))
    return {line.split()[0]: line.split()[-3:] for line in lines[header + 1 :]}


def test_every_notifications_command_has_help() -> None:
    runner = CliRunner()
    for name in ("show", "set"):
        answer = runner.invoke(cli, ["notifications", name, "--help"])
        assert answer.exit_code == 0, name
        assert answer.output.startswith(f"Usage: cli notifications {name}"), answer.output


def test_show_names_each_topic_and_where_it_goes(
    logged_in: Callable[[str], Gpuctl], org: Org
) -> None:
    shown = logged_in("dev_a")("notifications", "show")

    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[:2] == ["email    on (dev_a@example.com)", "webhook  none"]
    assert lines[3].split() == ["TOPIC", "ABOUT", "IN_APP", "EMAIL", "WEBHOOK"]
    rows = rows_of(shown.stdout)
    assert list(rows) == TOPICS  # every topic, in the settings page's order
    assert rows["approval_needed"] == ["always", "on", "on"]
    assert rows["started"] == ["on", "off", "on"]  # the defaults: no email when work starts
    assert "My work was preempted" in next(line for line in lines if line.startswith("preempted"))


def test_set_changes_what_the_flags_name_and_keeps_the_rest(
    logged_in: Callable[[str], Gpuctl], org: Org
) -> None:
    gpuctl = logged_in("dev_a")

    done = gpuctl(
        "notifications",
        "set",
        "--channel",
        "email=off",
        "--topic",
        "preempted=off",
        "--topic",
        "email:started=on",
        "--webhook-url",
        SLACK,
        "--webhook-format",
        "slack",
    )

    assert done.returncode == 0, done.stderr
    row = NotificationSettings.objects.get(user=org.dev_a)
    assert row.email_enabled is False
    assert "preempted" not in row.in_app_topics + row.email_topics + row.webhook_topics
    assert "started" in row.email_topics
    assert (row.webhook_url, row.webhook_format) == (SLACK, "slack")
    assert row.in_app_topics == [t for t in TOPICS if t != "preempted"]  # the rest as it was
    assert done.stdout.splitlines()[:2] == [
        "email    off (dev_a@example.com)",
        f"webhook  {SLACK} (slack)",
    ]
    assert rows_of(done.stdout)["preempted"] == ["off", "off", "off"]
    assert rows_of(done.stdout)["started"] == ["on", "on", "on"]

    # A topic back on everywhere; the webhook forgotten; approval_needed stays in the inbox.
    again = gpuctl(
        "notifications",
        "set",
        "--topic",
        "preempted=on",
        "--channel",
        "webhook=off",
        "--topic",
        "approval_needed=off",
    )
    assert again.returncode == 0, again.stderr
    assert again.stderr == "note: approval_needed always reaches the portal's inbox.\n"
    row.refresh_from_db()
    assert row.webhook_url == "" and row.email_enabled is False
    assert "preempted" in row.in_app_topics and "preempted" in row.email_topics
    assert "approval_needed" in row.in_app_topics
    assert "approval_needed" not in row.email_topics
    assert rows_of(again.stdout)["approval_needed"] == ["always", "off", "off"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--topic", "gossip=on"), "Error: No topic 'gossip': one of " + ", ".join(TOPICS) + "."),
        (("--topic", "preempted=maybe"), "Error: --topic 'maybe': say on or off."),
        (("--topic", "pager:preempted=on"), "Error: No channel 'pager': in_app, email or webhook."),
        (
            ("--topic", "preempted"),
            "Error: --topic 'preempted': write TOPIC=on|off or CHANNEL:TOPIC=on|off.",
        ),
        (
            ("--channel", "in_app=off"),
            "Error: The portal's inbox is always on: switch its topics off with "
            "--topic in_app:TOPIC=off.",
        ),
        (
            ("--channel", "webhook=on"),
            "Error: A webhook needs its address: give --webhook-url URL.",
        ),
        ((), "Error: Nothing to change: give --channel, --topic or --webhook-url."),
    ],
)
def test_bad_flags_are_one_line_and_change_nothing(
    logged_in: Callable[[str], Gpuctl], org: Org, args: tuple[str, ...], says: str
) -> None:
    refused = logged_in("dev_a")("notifications", "set", *args)

    assert refused.returncode == 2
    assert refused.stderr == says + "\n"
    assert not NotificationSettings.objects.exists()


def test_the_apis_refusal_is_one_line_naming_the_field(
    logged_in: Callable[[str], Gpuctl], org: Org
) -> None:
    refused = logged_in("dev_a")(
        "notifications", "set", "--webhook-url", "http://127.0.0.1:8080/hook"
    )

    assert refused.returncode == 1
    assert refused.stderr.startswith("Error: webhook_url: ")
    assert len(refused.stderr.splitlines()) == 1, refused.stderr
    assert not NotificationSettings.objects.exists()


def test_each_user_sees_and_changes_only_their_own_settings(
    logged_in: Callable[[str], Gpuctl], org: Org
) -> None:
    update_notification_settings(actor=org.dev_a, webhook_url=SLACK, email_enabled=False)
    gpuctl = logged_in("dev_b")

    shown = gpuctl("notifications", "show")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[:2] == ["email    on (dev_b@example.com)", "webhook  none"]
    assert SLACK not in shown.stdout
    changed = gpuctl("notifications", "set", "--channel", "email=off", "--topic", "budget=off")
    assert changed.returncode == 0, changed.stderr

    dev_a = NotificationSettings.objects.get(user=org.dev_a)
    assert (dev_a.webhook_url, dev_a.email_enabled) == (SLACK, False)
    assert "budget" in dev_a.in_app_topics
    dev_b = NotificationSettings.objects.get(user=org.dev_b)
    assert dev_b.email_enabled is False and "budget" not in dev_b.in_app_topics


def test_changes_builds_one_patch_from_the_flags() -> None:
    current = {
        "email_enabled": True,
        "in_app_topics": ["decided", "started"],
        "email_topics": ["decided"],
        "webhook_topics": [],
        "webhook_url": "",
        "topics": [{"topic": t, "description": t, "always_in_app": False} for t in TOPICS],
    }
    body = changes(
        current,
        channels=[("email", False)],
        topics=[parse_topic("decided=off"), parse_topic("webhook:started=on")],
        webhook_url=None,
        webhook_format=None,
    )
    assert body == {
        "email_enabled": False,
        "in_app_topics": ["started"],
        "email_topics": [],
        "webhook_topics": ["started"],
    }
    assert parse_topic("in-app:budget=OFF") == TopicSwitch("budget", False, ("in_app",))
    with pytest.raises(SettingError, match="say on or off"):
        parse_topic("budget=yes")

"""`gpuctl notifications`: the caller's notification settings as a table, and the changes that
`set` asks for turned into one PATCH of `/api/v1/me/notification-settings/`.

The topics (their names, descriptions and which always reach the inbox) come from the API's
`topics`, never from a list kept here; the API checks what is sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The channels as the API names them, each with its list of topics; `in-app` is accepted too.
CHANNELS = ("in_app", "email", "webhook")
TOPIC_FIELDS = {"in_app": "in_app_topics", "email": "email_topics", "webhook": "webhook_topics"}
SWITCH = {"on": True, "off": False}


class SettingError(ValueError):
    """A flag of `notifications set` that cannot be carried out; its text says why."""


@dataclass(frozen=True, slots=True)
class TopicSwitch:
    """`--topic [CHANNEL:]TOPIC=on|off`: a topic on one channel, or on all three."""

    topic: str
    on: bool
    channels: tuple[str, ...] = field(default=CHANNELS)


def _channel(text: str) -> str:
    name = text.strip().lower().replace("-", "_")
    if name not in CHANNELS:
        raise SettingError(f"No channel {text!r}: in_app, email or webhook.")
    return name


def _on_off(flag: str, text: str) -> bool:
    if text.strip().lower() not in SWITCH:
        raise SettingError(f"{flag} {text!r}: say on or off.")
    return SWITCH[text.strip().lower()]


def parse_channel(text: str) -> tuple[str, bool]:
    """`--channel email=off` → ("email", False)."""
    name, equals, value = text.partition("=")
    if not equals:
        raise SettingError(f"--channel {text!r}: write CHANNEL=on or CHANNEL=off.")
    return _channel(name), _on_off("--channel", f"{value}")


def parse_topic(text: str) -> TopicSwitch:
    """`--topic preempted=off` (every channel) or `--topic email:started=on` (one)."""
    target, equals, value = text.partition("=")
    if not equals or not target.strip():
        raise SettingError(f"--topic {text!r}: write TOPIC=on|off or CHANNEL:TOPIC=on|off.")
    channel, colon, topic = target.rpartition(":")
    channels = (_channel(channel),) if colon else CHANNELS
    return TopicSwitch(topic=topic.strip(), on=_on_off("--topic", value), channels=channels)


def changes(
    current: dict[str, Any],
    *,
    channels: list[tuple[str, bool]],
    topics: list[TopicSwitch],
    webhook_url: str | None,
    webhook_format: str | None,
) -> dict[str, Any]:
    """The PATCH body that makes `current` (the API's answer) what the flags ask, in order.

    `email=on|off` switches email; `webhook=off` forgets the webhook's URL (the API sends to
    none then), `webhook=on` needs `--webhook-url`; the inbox has no off switch (its topics
    do). A topic the API does not list is refused here, naming the ones it does."""
    body: dict[str, Any] = {}
    for channel, on in channels:
        if channel == "in_app":
            raise SettingError(
                "The portal's inbox is always on: switch its topics off with "
                "--topic in_app:TOPIC=off."
            )
        if channel == "email":
            body["email_enabled"] = on
        elif not on:
            body["webhook_url"] = ""
        elif not (webhook_url or current.get("webhook_url")):
            raise SettingError("A webhook needs its address: give --webhook-url URL.")
    if webhook_url is not None:
        body["webhook_url"] = webhook_url
    if webhook_format is not None:
        body["webhook_format"] = webhook_format
    known = [row["topic"] for row in current.get("topics", [])]
    lists = {name: list(current.get(TOPIC_FIELDS[name], [])) for name in CHANNELS}
    for switch in topics:
        if known and switch.topic not in known:
            raise SettingError(f"No topic {switch.topic!r}: one of {', '.join(known)}.")
        for channel in switch.channels:
            chosen = lists[channel]
            if switch.on and switch.topic not in chosen:
                chosen.append(switch.topic)
            elif not switch.on and switch.topic in chosen:
                chosen.remove(switch.topic)
            body[TOPIC_FIELDS[channel]] = chosen
    return body


def always_in_inbox(current: dict[str, Any], topics: list[TopicSwitch]) -> list[str]:
    """The topics asked off in the inbox that always reach it (a lead's decisions)."""
    always = {row["topic"] for row in current.get("topics", []) if row.get("always_in_app")}
    return sorted(
        {s.topic for s in topics if not s.on and "in_app" in s.channels and s.topic in always}
    )


def channel_lines(current: dict[str, Any]) -> dict[str, str]:
    """Where notices go: email on or off (to which address), the webhook or none."""
    address = current.get("email") or "no address on your account"
    email = f"{'on' if current.get('email_enabled') else 'off'} ({address})"
    url = current.get("webhook_url") or ""
    webhook = f"{url} ({current.get('webhook_format', 'json')})" if url else "none"
    lines = {"email": email, "webhook": webhook}
    if url and current.get("webhook_last_sent_at"):
        lines["last webhook"] = (
            f"{str(current['webhook_last_sent_at'])[:16].replace('T', ' ')}: "
            f"{current.get('webhook_last_result') or '-'}"
        )
    return lines


TOPIC_COLUMNS = ("topic", "about", "in_app", "email", "webhook")


def topic_rows(current: dict[str, Any]) -> list[list[str]]:
    """One row per topic: on or off per channel ("always" for what always reaches the inbox).

    Topics the API does not list (an older portal) are those that some channel carries."""
    listed = current.get("topics") or [
        {"topic": topic, "description": "", "always_in_app": False}
        for topic in dict.fromkeys(
            topic for name in CHANNELS for topic in current.get(TOPIC_FIELDS[name], [])
        )
    ]
    rows = []
    for row in listed:
        topic = row["topic"]
        cells = [topic, row.get("description") or "-"]
        for name in CHANNELS:
            if name == "in_app" and row.get("always_in_app"):
                cells.append("always")
            else:
                cells.append("on" if topic in current.get(TOPIC_FIELDS[name], []) else "off")
        rows.append(cells)
    return rows

"""Each user chooses which topics reach them in the portal, by email and on their own webhook.

1. A topic or channel switched off sends nothing on it; one switched on sends (email through
   Django's locmem outbox, the webhook to a real HTTP receiver on loopback, allowed for the
   test by NOTIFICATION_WEBHOOK_ALLOWED_HOSTS).
2. A webhook URL must be https to a public address: loopback, private, link-local and cluster
   names are a clear error on the page and in the API, and refused again at send time.
3. A user reads and changes only their own settings.
4. A webhook that fails is logged and shown to its owner; it never fails the notice's sender.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from scheduling.services.notifications import notify, topic_of_event
from tenants.choices import NotificationTopic, WebhookFormat
from tenants.models import Notification, NotificationSettings
from tenants.services.notification_settings import update_notification_settings
from tenants.validators import UnsafeWebhookAddress, public_address_of, validate_webhook_url
from tests.support.personas import Org, api_client
from tests.support.receivers import WebhookReceiver, run_webhook_receiver

pytestmark = pytest.mark.django_db

URL = "/api/v1/me/notification-settings/"
ALL_TOPICS = list(NotificationTopic.values)


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    yield from run_webhook_receiver()


@pytest.fixture
def failing_receiver() -> Iterator[WebhookReceiver]:
    yield from run_webhook_receiver(status=500)


@pytest.fixture
def loopback_allowed(settings: Any) -> None:
    """The test's receiver listens on loopback: the operator's allow-list admits it."""
    settings.NOTIFICATION_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]


def rejection(user: Any, *, capture: Any) -> None:
    """Tell `user` their request was rejected (topic: decided), running what follows the
    commit (the email and webhook tasks run inline)."""
    with capture(execute=True):
        notify(
            users=[user],
            subject="GPU request 7 rejected",
            body="Too big.",
            event={"type": "request.rejected", "request": 7},
        )


# --- 1. What is sent where --------------------------------------------------------------------


def test_by_default_a_notice_reaches_the_inbox_and_the_email_and_no_webhook(
    org: Org, django_capture_on_commit_callbacks: Any
) -> None:
    rejection(org.dev_a, capture=django_capture_on_commit_callbacks)

    assert Notification.objects.filter(recipient=org.dev_a).count() == 1
    assert [m.to for m in mail.outbox] == [["dev_a@example.com"]]


def test_email_switched_off_sends_no_email_but_keeps_the_inbox(
    org: Org, django_capture_on_commit_callbacks: Any
) -> None:
    update_notification_settings(actor=org.dev_a, email_enabled=False)

    rejection(org.dev_a, capture=django_capture_on_commit_callbacks)

    assert mail.outbox == []
    assert Notification.objects.filter(recipient=org.dev_a).count() == 1


def test_a_topic_switched_off_for_email_sends_no_email_of_it_only(
    org: Org, django_capture_on_commit_callbacks: Any
) -> None:
    everything_but_decisions = [t for t in ALL_TOPICS if t != NotificationTopic.DECIDED]
    update_notification_settings(actor=org.dev_a, email_topics=everything_but_decisions)

    rejection(org.dev_a, capture=django_capture_on_commit_callbacks)
    assert mail.outbox == []

    with django_capture_on_commit_callbacks(execute=True):
        notify(
            users=[org.dev_a],
            subject="GPU request 7 finished",
            body="",
            event={"type": "request.succeeded", "request": 7},
        )
    assert [m.subject for m in mail.outbox] == ["GPU request 7 finished"]


def test_a_topic_switched_off_in_the_portal_leaves_no_inbox_notification(
    org: Org, django_capture_on_commit_callbacks: Any
) -> None:
    update_notification_settings(
        actor=org.dev_a, in_app_topics=[t for t in ALL_TOPICS if t != NotificationTopic.DECIDED]
    )

    rejection(org.dev_a, capture=django_capture_on_commit_callbacks)

    assert not Notification.objects.filter(recipient=org.dev_a).exists()
    assert len(mail.outbox) == 1  # email still carries it


def test_a_decision_asked_of_a_lead_always_reaches_their_inbox(
    org: Org, django_capture_on_commit_callbacks: Any
) -> None:
    update_notification_settings(actor=org.lead_a, in_app_topics=[], email_enabled=False)
    stored = NotificationSettings.objects.get(user=org.lead_a)
    assert stored.in_app_topics == [NotificationTopic.APPROVAL_NEEDED]

    with django_capture_on_commit_callbacks(execute=True):
        notify(
            users=[org.lead_a],
            subject="GPU request 7 needs your approval",
            body="",
            event={"type": "request.pending_approval", "request": 7},
        )

    assert Notification.objects.filter(recipient=org.lead_a).count() == 1
    assert mail.outbox == []


def test_one_recipients_settings_do_not_change_what_another_gets(
    org: Org, django_capture_on_commit_callbacks: Any
) -> None:
    update_notification_settings(actor=org.dev_a, email_enabled=False, in_app_topics=[])

    with django_capture_on_commit_callbacks(execute=True):
        notify(
            users=[org.dev_a, org.lead_a],
            subject="GPU request 7 rejected",
            body="",
            event={"type": "request.rejected", "request": 7},
        )

    assert list(Notification.objects.values_list("recipient__username", flat=True)) == ["lead_a"]
    assert [m.to for m in mail.outbox] == [["lead_a@example.com"]]


def test_a_users_webhook_hears_the_topics_they_chose_in_their_format(
    org: Org,
    receiver: WebhookReceiver,
    loopback_allowed: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    update_notification_settings(
        actor=org.dev_a,
        webhook_url=f"{receiver.url}/hooks/dev-a?key=s3cret",
        webhook_format=WebhookFormat.SLACK,
        webhook_topics=[NotificationTopic.DECIDED],
    )

    rejection(org.dev_a, capture=django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        notify(
            users=[org.dev_a],
            subject="GPU request 7 started",
            body="",
            event={"type": "request.running", "request": 7},
        )

    assert [call.path for call in receiver.calls] == ["/hooks/dev-a?key=s3cret"]
    call = receiver.calls[0]
    assert call.headers["Content-Type"] == "application/json"
    assert call.body["text"].startswith("GPU request 7 rejected")
    stored = NotificationSettings.objects.get(user=org.dev_a)
    assert stored.webhook_last_result == "Delivered (HTTP 200)."


def test_without_a_webhook_url_nothing_is_posted(
    org: Org,
    receiver: WebhookReceiver,
    loopback_allowed: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    update_notification_settings(actor=org.dev_a, webhook_url=receiver.url)
    update_notification_settings(actor=org.dev_a, webhook_url="")

    rejection(org.dev_a, capture=django_capture_on_commit_callbacks)

    assert receiver.calls == []


def test_a_failing_webhook_is_reported_to_its_owner_and_never_fails_the_sender(
    org: Org,
    failing_receiver: WebhookReceiver,
    loopback_allowed: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    failing = failing_receiver
    update_notification_settings(actor=org.dev_a, webhook_url=failing.url)

    rejection(org.dev_a, capture=django_capture_on_commit_callbacks)

    assert len(failing.calls) == 1  # one try, no retry storm against a broken receiver
    stored = NotificationSettings.objects.get(user=org.dev_a)
    assert stored.webhook_last_result == "Failed: answered HTTP 500"
    assert Notification.objects.filter(recipient=org.dev_a).count() == 1


def test_a_webhook_saved_before_its_host_turned_private_is_not_posted_to(
    org: Org, receiver: WebhookReceiver, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.NOTIFICATION_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    update_notification_settings(actor=org.dev_a, webhook_url=receiver.url)
    settings.NOTIFICATION_WEBHOOK_ALLOWED_HOSTS = []  # the operator withdrew the exception

    rejection(org.dev_a, capture=django_capture_on_commit_callbacks)

    assert receiver.calls == []
    stored = NotificationSettings.objects.get(user=org.dev_a)
    assert stored.webhook_last_result.startswith("Not sent:")


@pytest.mark.parametrize(
    ("event_type", "topic"),
    [
        ("request.pending_approval", NotificationTopic.APPROVAL_NEEDED),
        ("request.asked_extension", NotificationTopic.APPROVAL_NEEDED),
        ("request.approved", NotificationTopic.DECIDED),
        ("request.rejected", NotificationTopic.DECIDED),
        ("request.expired", NotificationTopic.DECIDED),
        ("request.running", NotificationTopic.STARTED),
        ("request.succeeded", NotificationTopic.FINISHED),
        ("request.failed", NotificationTopic.FINISHED),
        ("request.preempted", NotificationTopic.PREEMPTED),
        ("request.preempted_final", NotificationTopic.PREEMPTED),
        ("reclaim.idle_warning", NotificationTopic.RECLAIMED),
        ("reclaim.timeout", NotificationTopic.RECLAIMED),
        ("budget.alert", NotificationTopic.BUDGET),
        ("request.something_new", NotificationTopic.OTHER),
    ],
)
def test_every_event_is_filed_under_one_topic(event_type: str, topic: str) -> None:
    assert topic_of_event(event_type) == topic


# --- 2. Where a webhook may point -------------------------------------------------------------

SAFE_URLS = [
    "https://hooks.slack.com/services/T000/B000/XXXX",
    "https://prod-01.westeurope.logic.azure.com:443/workflows/abc/triggers/manual/paths/invoke",
    "https://93.184.215.14/hook",
]
UNSAFE_URLS = [
    ("http://hooks.slack.com/services/T000/B000/XXXX", "https://"),
    ("https://127.0.0.1/hook", "loopback"),
    ("https://[::1]/hook", "loopback"),
    ("https://[::ffff:127.0.0.1]/hook", "loopback"),
    ("https://10.0.0.5/hook", "private"),
    ("https://192.168.1.20/hook", "private"),
    ("https://169.254.169.254/latest/meta-data", "link-local"),
    ("https://localhost/hook", "inside a network"),
    ("https://kubernetes.default.svc/api", "inside a network"),
    ("https://gpu-portal.portal.svc.cluster.local/api/v1/", "inside a network"),
    ("https://intranet/hook", "inside a network"),
    ("https://0x7f.1/hook", "not a public host"),
    ("https://user:pw@hooks.slack.com/x", "user name"),
    ("ftp://hooks.slack.com/x", "valid URL"),
]


@pytest.mark.parametrize("url", SAFE_URLS)
def test_an_https_url_to_a_public_host_is_accepted(url: str) -> None:
    validate_webhook_url(url)


@pytest.mark.parametrize(("url", "says"), UNSAFE_URLS)
def test_a_url_into_the_network_or_in_clear_text_is_refused_in_words(url: str, says: str) -> None:
    with pytest.raises(ValidationError) as refused:
        validate_webhook_url(url)
    assert says in " ".join(refused.value.messages)


def test_an_allowed_host_may_be_http_and_private(settings: Any) -> None:
    settings.NOTIFICATION_WEBHOOK_ALLOWED_HOSTS = ["relay.internal"]
    validate_webhook_url("http://relay.internal:8080/notices")
    with pytest.raises(ValidationError):
        validate_webhook_url("http://other.internal/notices")


def test_a_name_resolving_to_loopback_is_refused_at_send_time() -> None:
    with pytest.raises(UnsafeWebhookAddress, match="non-public"):
        public_address_of("localhost", 443)


# --- 3. The API: one's own settings only ------------------------------------------------------


def test_the_api_shows_the_defaults_before_a_user_chose(org: Org) -> None:
    body = api_client(org.dev_a).get(URL).json()

    assert body["in_app_topics"] == ALL_TOPICS
    assert body["email_enabled"] is True
    assert body["email"] == "dev_a@example.com"
    assert NotificationTopic.STARTED not in body["email_topics"]
    assert body["webhook_url"] == ""
    assert body["updated_at"] is None
    assert not NotificationSettings.objects.exists()  # reading stores nothing


def test_the_api_lists_every_topic_with_its_description(org: Org) -> None:
    body = api_client(org.dev_a).get(URL).json()

    assert [row["topic"] for row in body["topics"]] == ALL_TOPICS
    preempted = next(row for row in body["topics"] if row["topic"] == "preempted")
    assert preempted == {
        "topic": "preempted",
        "description": "My work was preempted",
        "always_in_app": False,
    }
    assert [row["topic"] for row in body["topics"] if row["always_in_app"]] == ["approval_needed"]


def test_a_put_replaces_the_callers_settings(org: Org) -> None:
    client = api_client(org.dev_a)
    body = {
        "in_app_topics": ["finished", "budget"],
        "email_enabled": False,
        "email_topics": ["preempted"],
        "webhook_url": "https://hooks.slack.com/services/T000/B000/XXXX",
        "webhook_format": "slack",
        "webhook_topics": ["preempted", "finished"],
    }

    response = client.put(URL, body, format="json")

    assert response.status_code == 200, response.content
    assert response.json()["in_app_topics"] == ["approval_needed", "finished", "budget"]
    assert response.json()["webhook_topics"] == ["finished", "preempted"]
    assert client.get(URL).json()["webhook_url"] == body["webhook_url"]
    assert client.patch(URL, {"email_enabled": True}, format="json").json()["email_enabled"]
    assert client.get(URL).json()["email_topics"] == ["preempted"]


@pytest.mark.parametrize(("url", "says"), UNSAFE_URLS[:4])
def test_the_api_refuses_an_unsafe_webhook_naming_the_field(org: Org, url: str, says: str) -> None:
    response = api_client(org.dev_a).patch(URL, {"webhook_url": url}, format="json")

    assert response.status_code == 400
    assert says in str(response.json()["error"]["fields"]["webhook_url"])
    assert not NotificationSettings.objects.filter(webhook_url=url).exists()


def test_an_unknown_topic_is_a_400(org: Org) -> None:
    response = api_client(org.dev_a).patch(URL, {"email_topics": ["gossip"]}, format="json")
    assert response.status_code == 400
    assert "email_topics" in response.json()["error"]["fields"]


def test_another_users_settings_can_be_neither_read_nor_changed(org: Org) -> None:
    update_notification_settings(
        actor=org.dev_a, webhook_url="https://hooks.slack.com/services/T/B/dev-a-secret"
    )
    intruder = api_client(org.dev_b)

    seen = intruder.get(URL).json()
    response = intruder.put(
        URL,
        {
            "user": org.dev_a.pk,
            "in_app_topics": [],
            "email_enabled": False,
            "email_topics": [],
            "webhook_url": "https://attacker.example.com/hook",
            "webhook_format": "json",
            "webhook_topics": ALL_TOPICS,
        },
        format="json",
    )
    admin_sees = api_client(org.admin).get(URL).json()

    assert seen["webhook_url"] == "" and seen["email"] == "dev_b@example.com"
    assert response.status_code == 200  # the intruder changed their own settings, only
    assert admin_sees["webhook_url"] == ""
    dev_a = NotificationSettings.objects.get(user=org.dev_a)
    assert dev_a.webhook_url == "https://hooks.slack.com/services/T/B/dev-a-secret"
    assert dev_a.email_enabled is True
    assert NotificationSettings.objects.get(user=org.dev_b).webhook_url == (
        "https://attacker.example.com/hook"
    )


def test_an_anonymous_caller_has_no_settings(org: Org) -> None:
    assert api_client(None).get(URL).status_code in (401, 403)


def test_the_schema_documents_the_endpoint(org: Org) -> None:
    schema = api_client(org.dev_a).get(reverse("schema"), {"format": "json"}).json()
    operations = schema["paths"]["/api/v1/me/notification-settings/"]
    assert {"get", "put", "patch"} <= set(operations)
    settings_schema = schema["components"]["schemas"]["NotificationSettings"]
    assert settings_schema["properties"]["email_topics"]["items"]["$ref"].endswith(
        "NotificationTopicEnum"
    )


# --- The page ---------------------------------------------------------------------------------


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_notifications_page_links_to_the_settings_page(org: Org) -> None:
    page = signed_in(org.dev_a).get(reverse("notifications-page")).content.decode()
    assert reverse("notification-settings-page") in page


def test_the_settings_page_saves_the_users_choices(org: Org) -> None:
    client = signed_in(org.dev_a)
    page = client.get(reverse("notification-settings-page")).content.decode()
    assert "My work was preempted" in page

    response = client.post(
        reverse("notification-settings-page"),
        {
            "in_app_topics": ["finished"],
            "email_topics": ["preempted", "budget"],
            "webhook_url": "https://hooks.slack.com/services/T/B/X",
            "webhook_format": "teams",
            "webhook_topics": ["preempted"],
        },
    )

    assert response.status_code == 302
    stored = NotificationSettings.objects.get(user=org.dev_a)
    assert stored.email_enabled is False  # unticked
    assert stored.email_topics == ["preempted", "budget"]
    assert stored.in_app_topics == ["approval_needed", "finished"]
    assert (stored.webhook_format, stored.webhook_topics) == ("teams", ["preempted"])
    again = client.get(reverse("notification-settings-page")).content.decode()
    assert 'value="https://hooks.slack.com/services/T/B/X"' in again


def test_the_settings_page_refuses_a_private_webhook_in_words(org: Org) -> None:
    response = signed_in(org.dev_a).post(
        reverse("notification-settings-page"),
        {"email_enabled": "on", "webhook_url": "https://10.1.2.3/hook", "webhook_format": "json"},
    )

    assert response.status_code == 200
    assert "private" in response.content.decode()
    assert 'data-testid="webhook-url-error"' in response.content.decode()
    assert not NotificationSettings.objects.filter(webhook_url__contains="10.1.2.3").exists()

"""The notifications page: the signed-in user's inbox, newest first, with mark-read; and their
notification settings: which topics reach them in the portal, by email, on their webhook."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from portal.forms import NotificationSettingsForm
from tenants.choices import NotificationKind, NotificationTopic
from tenants.errors import DomainError, show_on_form
from tenants.models import ALWAYS_IN_APP_TOPICS, Notification
from tenants.selectors import notification_settings_of
from tenants.services.notification_settings import update_notification_settings
from tenants.services.notifications import mark_notifications_read

PAGE_SIZE = 30


@login_required
def notifications_page(request: HttpRequest) -> HttpResponse:
    """The inbox; `?unread=1` shows only the unread, `?kind=` one kind."""
    notifications = Notification.objects.visible_to(request.user)
    only_unread = request.GET.get("unread") == "1"
    kind = request.GET.get("kind", "")
    if only_unread:
        notifications = notifications.filter(read_at__isnull=True)
    if kind in NotificationKind.values:
        notifications = notifications.filter(kind=kind)
    page = Paginator(notifications, PAGE_SIZE).get_page(request.GET.get("page"))
    return render(
        request,
        "portal/notifications.html",
        {
            "page": page,
            "only_unread": only_unread,
            "kind": kind,
            "kinds": NotificationKind.choices,
        },
    )


@login_required
@require_POST
def notification_read(request: HttpRequest, pk: int) -> HttpResponse:
    """Mark one read, then open what it is about (or go back to the inbox)."""
    notification = get_object_or_404(Notification.objects.visible_to(request.user), pk=pk)
    mark_notifications_read(user=request.user, ids=[notification.pk])
    if request.POST.get("open") and notification.url:
        return redirect(notification.url)
    return redirect("notifications-page")


@login_required
@require_POST
def notifications_read_all(request: HttpRequest) -> HttpResponse:
    mark_notifications_read(user=request.user)
    return redirect("notifications-page")


@login_required
def notification_settings_page(request: HttpRequest) -> HttpResponse:
    """The user's own settings: a row per topic, a column per channel; POST saves them."""
    row = notification_settings_of(user=request.user)
    fields = ["in_app_topics", "email_enabled", "email_topics"]
    fields += ["webhook_url", "webhook_format", "webhook_topics"]
    if request.method == "POST":
        form = NotificationSettingsForm(request.POST)
        if form.is_valid():
            try:
                update_notification_settings(actor=request.user, **form.cleaned_data)
            except DomainError as error:
                show_on_form(form, error)
            else:
                messages.success(request, "Notification settings saved.")
                return redirect("notification-settings-page")
    else:
        form = NotificationSettingsForm(initial={name: getattr(row, name) for name in fields})
    chosen = {
        name: set(form[name].value() or [])
        for name in ("in_app_topics", "email_topics", "webhook_topics")
    }
    topics = [
        {
            "value": value,
            "label": label,
            "in_app": value in chosen["in_app_topics"] or value in ALWAYS_IN_APP_TOPICS,
            "always_in_app": value in ALWAYS_IN_APP_TOPICS,
            "email": value in chosen["email_topics"],
            "webhook": value in chosen["webhook_topics"],
        }
        for value, label in NotificationTopic.choices
    ]
    return render(
        request,
        "portal/notification_settings.html",
        {"form": form, "topics": topics, "settings_row": row},
    )

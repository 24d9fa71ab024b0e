"""The notifications page: the signed-in user's inbox, newest first, with mark-read."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from tenants.choices import NotificationKind
from tenants.models import Notification
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

"""`{{ event.action|event_words }}`: an audit event's code as people read it in a history."""

from __future__ import annotations

from django import template

from scheduling.choices import RequestStatus

register = template.Library()

# Codes whose words are not their status label; a request's status moves read as the label.
EVENT_WORDS: dict[str, str] = {
    "request.submitted": "Submitted",
    "request.approved": "Approved",
    "request.queued": "Queued",
    "request.asked_extension": "Asked the team lead for more time",
    "request.asked_idle_exemption": "Asked the team lead for an idle exemption",
    "request.extended": "Max runtime extended",
    "request.idle_exemption": "Exempted from idle reclamation",
    "request.kept_alive": "Kept alive by its owner",
    "reclaim.idle": "Reclaimed: idle",
    "reclaim.idle_warning": "Warned: idle, will be reclaimed",
    "reclaim.timeout": "Stopped at its max runtime",
    "reclaim.timeout_warning": "Warned: max runtime is near",
    "reclaim.node_lost": "Lost its node",
    "reclaim.stuck_pending": "Stuck starting, stopped",
    "reclaim.crash_loop": "Crashing repeatedly, stopped",
    "reclaim.zombie": "Leftover workload removed",
    "gang.member_failed": "A member of its group failed",
    "allocation.reconciled": "Allocation corrected from the cluster",
}


@register.filter
def event_words(action: str) -> str:
    """The words for an event code: a known phrase, a status label, or the code made readable."""
    if action in EVENT_WORDS:
        return EVENT_WORDS[action]
    _, _, name = action.partition(".")
    if name in RequestStatus.values:
        return str(RequestStatus(name).label)
    return (name or action).replace("_", " ").capitalize()


@register.filter
def hours_label(seconds: int | None) -> str:
    """A duration in seconds as people say it: "90 min", "2 h", "1.5 h", "3 d"."""
    if seconds is None:
        return ""
    if seconds < 2 * 3600 and seconds % 3600:
        return f"{round(seconds / 60)} min"
    if seconds >= 72 * 3600 and seconds % 86400 == 0:
        return f"{seconds // 86400} d"
    return f"{seconds / 3600:g} h"

"""Start-up checks that keep workloads on an origin of their own (docs/security.md,
"Workload origins"): the portal's cookies must never be sent to a workload's host."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import Error


def host_of(host_and_port: str) -> str:
    """`workloads.example.org` from `workloads.example.org:8443` (lower case, no dot at the end)."""
    host = urlsplit(f"//{host_and_port}").hostname or ""
    return host.rstrip(".").lower()


def workload_origin_problems(
    *,
    workload_domain: str,
    portal_hosts: Iterable[str],
    cookie_domains: Iterable[str | None],
) -> list[str]:
    """What makes the portal's cookies reachable from workload hosts: a cookie domain (the
    session and CSRF cookies must stay host-only), or a WORKLOAD_DOMAIN that is one of the
    portal's hosts or a parent of one (a workload host would then share the portal's site)."""
    problems = [
        f"a cookie domain ({domain!r}) would send the portal's cookies to other hosts; "
        "leave SESSION_COOKIE_DOMAIN and CSRF_COOKIE_DOMAIN unset"
        for domain in cookie_domains
        if domain
    ]
    domain = host_of(workload_domain)
    if not domain:
        return [*problems, "WORKLOAD_DOMAIN is empty"]
    for portal_host in portal_hosts:
        host = portal_host.lstrip(".").rstrip(".").lower()
        if host and host != "*" and (host == domain or host.endswith("." + domain)):
            problems.append(
                f"WORKLOAD_DOMAIN {domain!r} is the portal's host {host!r} or a parent of it; "
                "give workloads a domain of their own"
            )
    return problems


def configured_problems() -> list[str]:
    """The problems of the running settings (the workload domain's own ALLOWED_HOSTS entry,
    which the settings add, is not a portal host)."""
    domain = host_of(settings.WORKLOAD_DOMAIN)
    portal_hosts = [h for h in settings.ALLOWED_HOSTS if h != "." + domain]
    if settings.PORTAL_URL:
        portal_hosts.append(urlsplit(settings.PORTAL_URL).hostname or "")
    return workload_origin_problems(
        workload_domain=settings.WORKLOAD_DOMAIN,
        portal_hosts=portal_hosts,
        cookie_domains=(settings.SESSION_COOKIE_DOMAIN, settings.CSRF_COOKIE_DOMAIN),
    )


def check_workload_origin(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """The system check (`manage.py check`) of the same rule."""
    return [Error(problem, id="runtime.E001") for problem in configured_problems()]

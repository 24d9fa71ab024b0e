"""Where a user's own webhook may point: an https address on the public internet, never a
loopback, private, link-local or cluster-internal one (the portal must not become a way into
the cluster's network).

The URL is checked when it is saved (`validate_webhook_url`: its form), and again at every send
against the addresses its name then resolves to (`public_address_of`), so a name that later
resolves inside the network is refused too. Hosts in NOTIFICATION_WEBHOOK_ALLOWED_HOSTS are
trusted receivers the operator named: http and any address are allowed for them.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator

# Names that only mean something inside a network, never on the public internet.
INTERNAL_SUFFIXES = (
    ".localhost",
    ".local",
    ".localdomain",
    ".internal",
    ".intranet",
    ".lan",
    ".home.arpa",
    ".svc",
    ".cluster.local",
)


class UnsafeWebhookAddress(ValueError):
    """The webhook's host resolves to an address the portal does not post to."""


def is_allowed_host(host: str) -> bool:
    """An operator named this host a trusted receiver (NOTIFICATION_WEBHOOK_ALLOWED_HOSTS)."""
    allowed = {name.lower() for name in settings.NOTIFICATION_WEBHOOK_ALLOWED_HOSTS}
    return host.lower() in allowed


def is_public_address(address: str) -> bool:
    """A global unicast address: not loopback, private, link-local, shared, reserved or
    multicast (an IPv4-mapped IPv6 address is judged as its IPv4 address)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def validate_webhook_url(url: str) -> None:
    """A webhook URL a user may save: https, a public host name or address; else a
    ValidationError that says what is wrong in words."""
    if not url:
        return
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").rstrip(".")
    except ValueError:
        parts, host = None, ""
    if parts is None or parts.scheme not in ("https", "http") or not host:
        raise ValidationError("Enter a valid URL, such as https://hooks.slack.com/services/…")
    if is_allowed_host(host):
        return
    if parts.scheme != "https":
        raise ValidationError("Use an https:// address: notices are not sent in clear text.")
    if parts.username or parts.password:
        raise ValidationError("Leave the user name and password out of the address.")
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None and not is_public_address(host):
        raise ValidationError(
            "This address is loopback, private or link-local: notices go to public "
            "addresses only, never into the portal's own network."
        )
    name = host.lower()
    if literal is None and (
        "." not in name or name == "localhost" or name.endswith(INTERNAL_SUFFIXES)
    ):
        raise ValidationError(
            f"{host} is a name inside a network, not a public host: notices go to public "
            "addresses only."
        )
    top_label = name.rsplit(".", 1)[-1]
    if literal is None and not (top_label.isalpha() or top_label.startswith("xn--")):
        raise ValidationError(f"{host} is not a public host name.")
    URLValidator(schemes=["https"])(url)


def public_address_of(host: str, port: int) -> str:
    """The address to connect to for `host`: its first resolved address, when every address
    it resolves to is public (or the host is allowed); else UnsafeWebhookAddress. Connecting
    to this very address keeps a second lookup from answering differently."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as error:
        raise UnsafeWebhookAddress(f"{host} could not be resolved ({error}).") from error
    addresses = [str(info[4][0]) for info in found]
    if not addresses:
        raise UnsafeWebhookAddress(f"{host} has no address.")
    if not is_allowed_host(host):
        private = [address for address in addresses if not is_public_address(address)]
        if private:
            raise UnsafeWebhookAddress(
                f"{host} resolves to a non-public address ({private[0]}); not sent."
            )
    return addresses[0]

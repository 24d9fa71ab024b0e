"""`manage.py user_account`: the audited way to change an account now that the admin is read-only.

manage.py user_account deactivate USERNAME
manage.py user_account activate USERNAME
manage.py user_account link-oidc USERNAME --issuer ISSUER --subject SUBJECT
manage.py user_account unlink-oidc USERNAME --issuer ISSUER --subject SUBJECT
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenants.services.accounts import set_account_active
from tenants.services.identity import (
    IdentityConflict,
    ProviderSubject,
    link_identity,
    unlink_identity,
)


class Command(BaseCommand):
    help = (
        "Switch an account on or off, or link it to (unlink it from) a person of the identity "
        "provider, by the ID token's issuer (iss) and subject (sub). Every change is audited."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "action", choices=["activate", "deactivate", "link-oidc", "unlink-oidc"]
        )
        parser.add_argument("username")
        parser.add_argument("--issuer", default="", help="the provider's issuer URL (iss)")
        parser.add_argument("--subject", default="", help="the person's subject at it (sub)")

    def handle(self, *args: Any, **options: Any) -> None:
        action, username = options["action"], options["username"]
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no account named {username!r}")
        if action in ("activate", "deactivate"):
            changed = set_account_active(actor=None, user=user, is_active=action == "activate")
            state = "active" if user.is_active else "inactive"
            self.stdout.write(f"{username} is {state}" + ("" if changed else " (unchanged)"))
            return
        if not options["issuer"] or not options["subject"]:
            raise CommandError(f"{action} needs --issuer and --subject")
        subject = ProviderSubject(issuer=options["issuer"], subject=options["subject"])
        if action == "link-oidc":
            try:
                link_identity(actor=None, user=user, subject=subject)
            except IdentityConflict as conflict:
                raise CommandError(str(conflict)) from None
            self.stdout.write(f"{username} signs in as {subject.subject} of {subject.issuer}")
        elif not unlink_identity(actor=None, user=user, subject=subject):
            raise CommandError(f"{username} is not linked to {subject.subject} of {subject.issuer}")
        else:
            self.stdout.write(f"{username} is no longer linked to {subject.subject}")

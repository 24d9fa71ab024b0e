"""`manage.py kueue_policy --diff | --apply`: the portal's policy as Kueue objects on the cluster
that KUBECONFIG (and KUBE_CONTEXT) name."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runtime.cluster.base import ClusterError
from runtime.kueue_policy import reconcile


class Command(BaseCommand):
    help = "Print (--diff) or apply (--apply) the Kueue objects the portal's policy compiles to."

    def add_arguments(self, parser: CommandParser) -> None:
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--diff", action="store_true", help="print what would change (default)")
        mode.add_argument(
            "--apply", action="store_true", help="apply with server-side apply; delete leftovers"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            pending = reconcile(apply=bool(options["apply"]))
        except ClusterError as exc:
            raise CommandError(str(exc)) from exc
        for change in pending:
            self.stdout.write(str(change))
        if not pending:
            self.stdout.write("no changes: the cluster's Kueue objects match the policy")
        elif options["apply"]:
            self.stdout.write(self.style.SUCCESS(f"applied {len(pending)} changes"))

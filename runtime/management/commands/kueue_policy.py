"""`manage.py kueue_policy --diff | --apply [--cluster SLUG]`: the portal's policy as Kueue objects
on one cluster: the local one (KUBECONFIG and KUBE_CONTEXT) unless `--cluster` names a registered
one, reached with its own kubeconfig."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runtime.cluster.base import ClusterError
from runtime.services.kueue_policy import reconcile
from scheduling.models import LOCAL_CLUSTER_SLUG, Cluster


class Command(BaseCommand):
    help = "Print (--diff) or apply (--apply) the Kueue objects the portal's policy compiles to."

    def add_arguments(self, parser: CommandParser) -> None:
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--diff", action="store_true", help="print what would change (default)")
        mode.add_argument(
            "--apply", action="store_true", help="apply with server-side apply; delete leftovers"
        )
        parser.add_argument(
            "--cluster",
            default=LOCAL_CLUSTER_SLUG,
            help=f"the cluster's slug (default: {LOCAL_CLUSTER_SLUG}, this deployment's own)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        slug = options["cluster"]
        cluster = Cluster.objects.filter(slug=slug).first()
        if cluster is None and slug != LOCAL_CLUSTER_SLUG:
            known = ", ".join(Cluster.objects.values_list("slug", flat=True)) or "none"
            raise CommandError(f"No cluster {slug!r} (registered: {known}).")
        if cluster is not None and cluster.scheduler_mode != "kueue":
            self.stderr.write(
                self.style.WARNING(
                    f"Cluster {slug} runs the portal's scheduler, not Kueue: "
                    "its requests do not use these objects."
                )
            )
        try:
            pending = reconcile(apply=bool(options["apply"]), cluster=cluster)
        except ClusterError as exc:
            raise CommandError(str(exc)) from exc
        for change in pending:
            self.stdout.write(str(change))
        if not pending:
            self.stdout.write("no changes: the cluster's Kueue objects match the policy")
        elif options["apply"]:
            self.stdout.write(self.style.SUCCESS(f"applied {len(pending)} changes"))

"""`manage.py kueue_policy --diff | --apply`: the portal's policy as Kueue objects on the cluster
that KUBECONFIG (and KUBE_CONTEXT) name."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from runtime.cluster.base import ClusterError
from runtime.cluster.kubernetes import KubernetesClusterBackend, load_api_client
from runtime.cluster.kubernetes_kueue import KueuePolicyClient
from runtime.cluster.kueue_objects import changes, compile_objects, object_key
from runtime.kueue_policy import current_policy
from runtime.propagation import push_project_quotas
from tenants.models import Project


class Command(BaseCommand):
    help = "Print (--diff) or apply (--apply) the Kueue objects the portal's policy compiles to."

    def add_arguments(self, parser: CommandParser) -> None:
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--diff", action="store_true", help="print what would change (default)")
        mode.add_argument(
            "--apply", action="store_true", help="apply with server-side apply; delete leftovers"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        desired = compile_objects(current_policy())
        try:
            api_client = load_api_client(settings.KUBECONFIG or None, settings.KUBE_CONTEXT)
            client = KueuePolicyClient(api_client)
            pending = changes(desired, client.live_objects())
            for change in pending:
                self.stdout.write(str(change))
            if not pending:
                self.stdout.write(f"no changes ({len(desired)} objects match the policy)")
                return
            if not options["apply"]:
                return
            # LocalQueues live in the project namespaces, which launches otherwise create.
            push_project_quotas(
                project_ids=Project.objects.values_list("pk", flat=True),
                backend=KubernetesClusterBackend(api_client=api_client),
            )
            by_key = {object_key(m): m for m in desired}
            for change in pending:
                if change.action == "delete":
                    client.delete(change)
                else:
                    client.apply(by_key[(change.kind, change.namespace, change.name)])
        except ClusterError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(self.style.SUCCESS(f"applied {len(pending)} changes"))

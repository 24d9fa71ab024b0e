"""The forms of the fleet settings pages: one ModelForm per object a platform admin manages.

A form validates what the model knows (types, ranges, unique names, named constraints); the
service it feeds re-checks the role and the rules across rows. Fields that name an object's
owner (a quota's team and flavor, a project's team, a membership's user and team) are fixed
once the object exists: the edit form shows them disabled.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django import forms
from django.contrib.auth import get_user_model

from accounting.models import Price, ResourcePrice
from scheduling.models import (
    ApprovalRule,
    Cluster,
    Flavor,
    NodePool,
    Quota,
    ReclaimPolicy,
    StorageQuota,
    Tier,
    local_cluster_id,
)
from scheduling.models.catalog import DEFAULT_KEEP_ALIVE_SECONDS, NotebookProfile
from tenants.errors import DomainError, show_on_form
from tenants.models import FAIR_SHARE_WEIGHT_MAX, Membership, Project, Team, Webhook


class ManageForm(forms.ModelForm):
    """Bootstrap classes on every widget, `is-invalid` on failed fields, owners fixed on edit."""

    fixed_on_edit: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            for name in self.fixed_on_edit:
                self.fields[name].disabled = True
        for field in self.fields.values():
            widget = field.widget
            if isinstance(widget, forms.CheckboxInput):
                widget.attrs["class"] = "form-check-input"
            elif isinstance(widget, forms.SelectMultiple):
                widget.attrs.update({"class": "form-select", "size": "4"})
            elif isinstance(widget, forms.Select):
                widget.attrs["class"] = "form-select"
            else:
                widget.attrs["class"] = "form-control"
            if isinstance(widget, forms.Textarea):
                widget.attrs["rows"] = "2"

    def full_clean(self) -> None:
        super().full_clean()
        for name in self.errors:
            if name in self.fields:
                self.fields[name].widget.attrs["class"] += " is-invalid"

    def add_domain_error(self, error: DomainError) -> None:
        show_on_form(self, error)

    def changes(self) -> dict[str, Any]:
        """The values an update service takes: every field the admin may still change."""
        return {
            name: value
            for name, value in self.cleaned_data.items()
            if name not in self.fixed_on_edit or self.instance.pk is None
        }


class TierForm(ManageForm):
    class Meta:
        model = Tier
        fields = [
            "name",
            "slug",
            "description",
            "max_runtime_seconds",
            "rank",
            "allowed_teams",
            "allowed_projects",
            "max_cpu_millicores",
            "max_memory_mib",
            "max_shm_mib",
            "preemption_grace_seconds",
            "lends_unassigned",
        ]
        labels = {"lends_unassigned": "Lend unassigned cards"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        projects = self.fields["allowed_projects"]
        projects.queryset = projects.queryset.select_related("team")  # type: ignore[attr-defined]


class NodePoolForm(ManageForm):
    cluster = forms.ModelChoiceField(
        queryset=Cluster.objects.all(),
        required=False,
        empty_label="Local cluster",
        help_text="The cluster the pool's nodes are in.",
    )

    def clean_cluster(self) -> Cluster:
        """Left empty: the local cluster, as for a pool made through the API."""
        chosen: Cluster | None = self.cleaned_data["cluster"]
        return chosen or Cluster.objects.get(pk=local_cluster_id())

    class Meta:
        model = NodePool
        fields = [
            "name",
            "slug",
            "tier",
            "cluster",
            "sharing_mode",
            "placement",
            "scoring",
            "allocation",
            "scheduler_name",
            "node_selector",
            "taints",
            "allowed_kinds",
            "short_reserve_fraction",
            "short_max_runtime_seconds",
            "is_pilot",
            "pilot_until",
            "pilot_teams",
        ]
        labels = {"is_pilot": "Pilot", "pilot_until": "Pilot until (last day)"}
        help_texts = {
            "node_selector": "Labels a node of the pool carries besides gpu-portal/pool=<slug>, "
            'e.g. {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}.',
            "is_pilot": "A pilot pool serves only its pilot teams until its last day, then "
            "every team its tier allows.",
        }
        widgets = {"pilot_until": forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d")}


class FlavorForm(ManageForm):
    class Meta:
        model = Flavor
        fields = [
            "name",
            "slug",
            "pool",
            "other_pools",
            "kind",
            "gpu_model",
            "gpu_memory_mib",
            "gpu_cores_percent",
            "mig_profile",
            "gpu_equivalent",
            "is_active",
            "default_cpu_millicores",
            "default_memory_mib",
            "default_shm_mib",
        ]


class StorageQuotaForm(ManageForm):
    """How many GiB of volumes a team's projects may claim."""

    fixed_on_edit = ("team",)

    class Meta:
        model = StorageQuota
        fields = ["team", "limit_gib"]


class ApprovalRuleForm(ManageForm):
    fixed_on_edit = ("tier",)

    class Meta:
        model = ApprovalRule
        fields = [
            "tier",
            "auto_approve_within_guaranteed",
            "auto_approve_max_priority",
            "lead_approves_whole_cards",
            "approval_ttl_hours",
        ]


class ReclaimPolicyForm(ManageForm):
    """A tier's reclaim policy; the tier comes from the page, so it is not a field."""

    class Meta:
        model = ReclaimPolicy
        fields = [
            "idle_threshold_percent",
            "idle_window_seconds",
            "notebook_idle_window_seconds",
            "idle_warning_seconds",
            "idle_marks_preemptible",
            "reclaim_idle",
            "timeout_warning_seconds",
            "pending_timeout_seconds",
            "max_attempts",
            "notebook_keep_alive_seconds",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["notebook_keep_alive_seconds"].required = False

    def clean_notebook_keep_alive_seconds(self) -> int:
        """Left empty: the built-in span (an hour), as for a policy made through the API."""
        value: int | None = self.cleaned_data["notebook_keep_alive_seconds"]
        if value is None:
            return DEFAULT_KEEP_ALIVE_SECONDS
        return value


class NotebookProfileForm(ManageForm):
    """A curated notebook server: its image, the tiers it may run on and its starting shape."""

    class Meta:
        model = NotebookProfile
        fields = ["name", "image", "description", "tiers", "flavor", "gpu_count", "is_active"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        flavors = self.fields["flavor"]
        flavors.queryset = Flavor.objects.filter(is_active=True).select_related(  # type: ignore[attr-defined]
            "pool__tier"
        )
        flavors.label_from_instance = lambda flavor: f"{flavor.name} ({flavor.pool.tier})"  # type: ignore[attr-defined]


class TeamQuotaForm(ManageForm):
    """A team's quota of one flavor (projects' parts are split by the team's lead)."""

    fixed_on_edit = ("team", "flavor")

    class Meta:
        model = Quota
        fields = ["team", "flavor", "guaranteed", "limit"]


class PriceForm(ManageForm):
    fixed_on_edit = ("flavor",)

    class Meta:
        model = Price
        fields = [
            "flavor",
            "price_per_hour",
            "currency",
            "effective_from",
            "preemptible_multiplier",
            "priority_multipliers",
        ]
        # The browser's date-time picker reads and sends ISO local time, which the field parses.
        widgets = {
            "effective_from": forms.DateTimeInput(
                attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"
            )
        }


class ResourcePriceForm(ManageForm):
    fixed_on_edit = ("resource",)

    class Meta:
        model = ResourcePrice
        fields = ["resource", "price_per_hour", "currency", "effective_from"]
        widgets = {
            "effective_from": forms.DateTimeInput(
                attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"
            )
        }


class WriteOnlyTextarea(forms.Textarea):
    """A textarea that never renders a value: what was typed into it is not sent back."""

    def format_value(self, value: Any) -> str | None:
        return None


class ClusterForm(ManageForm):
    """A cluster: its kubeconfig is required to register it and replaces the stored one when
    given on edit; the page never shows it. The local cluster takes none."""

    kubeconfig = forms.CharField(
        required=False,
        strip=False,
        widget=WriteOnlyTextarea(attrs={"spellcheck": "false", "autocomplete": "off"}),
        help_text="The kubeconfig the portal reaches the cluster with (its current context). "
        "It is sealed and never shown again.",
    )

    class Meta:
        model = Cluster
        fields = ["name", "slug", "scheduler", "is_active", "prometheus_url", "kubeconfig"]
        labels = {"is_active": "Active (gets new work)", "scheduler": "Scheduler mode"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["kubeconfig"].widget.attrs["rows"] = "8"
        if self.instance.pk is None:
            return
        if self.instance.is_local:
            del self.fields["kubeconfig"]
            self.fields["slug"].disabled = True
            scheduler = self.fields["scheduler"]
            scheduler.disabled = True
            scheduler.help_text = "This deployment's own cluster follows the SCHEDULER setting."
        else:
            kubeconfig = self.fields["kubeconfig"]
            kubeconfig.label = "Replace the kubeconfig"
            kubeconfig.help_text = "Leave empty to keep the stored one, which is never shown."


class WebhookForm(ManageForm):
    """A webhook: its URL is a credential (Slack's and Teams' carry their secret in it), so the
    page never shows it; on edit an empty URL keeps the stored one."""

    url = forms.URLField(
        required=False,
        max_length=500,
        assume_scheme="https",
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        label="URL",
        help_text="Where every notice is POSTed (http or https). Never shown again.",
    )

    class Meta:
        model = Webhook
        fields = ["name", "url", "payload_format", "is_active"]
        labels = {"payload_format": "Payload format", "is_active": "Active"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields["url"].label = "Replace the URL"
            self.fields["url"].help_text = "Leave empty to keep the stored one, never shown."

    def clean_url(self) -> str:
        url = str(self.cleaned_data.get("url") or "")
        if not url and self.instance.pk is None:
            raise forms.ValidationError("A new webhook needs its URL.")
        return url or self.instance.url


class TeamForm(ManageForm):
    class Meta:
        model = Team
        fields = ["name", "slug", "description"]


class ProjectForm(ManageForm):
    fixed_on_edit = ("team",)

    class Meta:
        model = Project
        fields = ["team", "name", "slug", "description"]


class _UserChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: Any) -> str:
        return str(obj.get_username())


class MembershipForm(ManageForm):
    """A user's role in a team (developer, team lead) or the organisation (no team), and in a
    team the member's fair-share weight."""

    fixed_on_edit = ("user", "team")

    user = _UserChoiceField(queryset=get_user_model().objects.order_by("username"))
    fair_share_weight = forms.IntegerField(
        label="Fair-share weight",
        min_value=1,
        max_value=FAIR_SHARE_WEIGHT_MAX,
        initial=1,
        required=False,
        help_text=(
            f"1-{FAIR_SHARE_WEIGHT_MAX}; in a team, a member of weight 3 gets three times the "
            "cards of a member of weight 1 when both have work waiting. Organisation roles "
            "keep 1; left empty, the weight stays as it is."
        ),
    )

    def clean_fair_share_weight(self) -> int:
        weight: int | None = self.cleaned_data.get("fair_share_weight")
        return self.instance.fair_share_weight if weight is None else weight

    class Meta:
        model = Membership
        fields = ["user", "team", "role", "fair_share_weight"]
        labels = {"team": "Team (empty for an organisation role)"}

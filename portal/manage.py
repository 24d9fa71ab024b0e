"""Fleet settings: the pages where platform admins manage the catalogue and the organisation.

One list page per kind of object (tiers, node pools, flavors, notebook profiles, approval rules,
reclaim policies, team quotas, prices, teams, projects, memberships, webhooks) with its create
form, an edit page and a delete confirmation. The pages hold no rules: every write goes through
the owning app's service, which checks the role again and records the audit event.

Who sees what: an object outside the user's `visible_to()` is 404, as everywhere; a page or an
object the user sees but may not manage is 403. A service's refusal comes back on the page:
a `DomainError` on the form (its fields when it names them), a `ConflictError` (409) or a
`ForbiddenError` (403) as a message above it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Model
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from accounting.models import Price, ResourcePrice
from accounting.services import prices as price_services
from portal.manage_forms import (
    ApprovalRuleForm,
    ClusterForm,
    FlavorForm,
    ManageForm,
    MembershipForm,
    NodePoolForm,
    NotebookProfileForm,
    PriceForm,
    ProjectForm,
    ReclaimPolicyForm,
    ResourcePriceForm,
    StorageQuotaForm,
    TeamForm,
    TeamQuotaForm,
    TierForm,
    WebhookForm,
)
from portal.templatetags.portal_format import format_money, format_number, format_when
from scheduling.engine.reserve import format_duration
from scheduling.models import (
    ApprovalRule,
    Cluster,
    Flavor,
    NodePool,
    Quota,
    ReclaimPolicy,
    StorageQuota,
    Tier,
)
from scheduling.models.catalog import NotebookProfile
from scheduling.services import catalog as catalog_services
from scheduling.services import clusters as cluster_services
from scheduling.services import notebook_profiles as profile_services
from scheduling.services import project_data as data_services
from tenants.errors import ConflictError, DomainError, ForbiddenError
from tenants.models import Membership, Project, ScopedQuerySet, Team, Webhook, scope_of
from tenants.scope import Actor
from tenants.services import webhooks as webhook_services
from tenants.services.organisation import (
    add_membership,
    change_membership,
    create_project,
    create_team,
    delete_project,
    delete_team,
    remove_membership,
    update_project,
    update_team,
)

Cell = Callable[[Any], Any]


@dataclass(frozen=True)
class Section:
    """One kind of object on the fleet settings pages, and the services that write it.

    `create` takes the form's values, `update` the object (as `instance_arg`) and the values
    still open to change, `delete` the object; each takes the acting user as `actor`.
    """

    slug: str
    title: str
    noun: str
    intro: str
    form: type[ManageForm]
    queryset: Callable[[], ScopedQuerySet]
    columns: tuple[tuple[str, Cell], ...]
    instance_arg: str
    create: Callable[..., Any]
    update: Callable[..., Any]
    delete: Callable[..., Any]

    @property
    def model(self) -> type[Model]:
        return self.queryset().model

    @property
    def list_route(self) -> str:
        return f"manage-{self.slug}"

    @property
    def edit_route(self) -> str:
        return f"manage-{self.slug}-edit"

    @property
    def delete_route(self) -> str:
        return f"manage-{self.slug}-delete"


def _yes_no(value: bool) -> str:
    return "yes" if value else "no"


def _names(objects: Any) -> str:
    return ", ".join(str(obj) for obj in objects.all()) or "–"


def _pilot_label(pool: NodePool) -> str:
    """ "Vision, Speech until 2027-01-31" for a pilot pool, "–" for any other."""
    if not pool.is_pilot:
        return "–"
    until = f" until {pool.pilot_until:%Y-%m-%d}" if pool.pilot_until else ""
    return f"{_names(pool.pilot_teams)}{until}"


def _update_storage_quota(*, actor: Actor, quota: StorageQuota, **changes: Any) -> StorageQuota:
    """A storage quota is set by team: the row names it."""
    return data_services.set_storage_quota(
        actor=actor, team=quota.team, limit_gib=changes.get("limit_gib", quota.limit_gib)
    )


def _update_team_quota(*, actor: Actor, quota: Quota, **amounts: Any) -> Quota:
    """Team quotas are set by owner and flavor: the quota row names both."""
    return catalog_services.set_team_quota(
        actor=actor, team=quota.team, flavor=quota.flavor, **amounts
    )


def _register_cluster(*, actor: Actor, kubeconfig: str = "", **fields: Any) -> Cluster:
    return cluster_services.register_cluster(actor=actor, kubeconfig_text=kubeconfig, **fields)


def _update_cluster(
    *, actor: Actor, cluster: Cluster, kubeconfig: str = "", **fields: Any
) -> Cluster:
    """The form's empty kubeconfig keeps the stored one; a typed one replaces it."""
    return cluster_services.update_cluster(
        actor=actor, cluster=cluster, kubeconfig_text=kubeconfig, **fields
    )


def _cluster_health(cluster: Cluster) -> str:
    if not cluster.is_reachable:
        return f"Unreachable since {format_when(cluster.last_error_at)}: {cluster.last_error}"
    if cluster.last_contact_at is None:
        return "Not contacted yet"
    return f"Reachable (last contact {format_when(cluster.last_contact_at)})"


SECTIONS: dict[str, Section] = {
    section.slug: section
    for section in (
        Section(
            slug="tiers",
            title="Tiers",
            noun="tier",
            intro="Scenario tiers: how long work may run and which teams may use them.",
            form=TierForm,
            queryset=lambda: Tier.objects.prefetch_related("allowed_teams", "allowed_projects"),
            columns=(
                ("Name", lambda tier: tier.name),
                ("Slug", lambda tier: tier.slug),
                ("Max runtime", lambda tier: format_duration(tier.max_runtime_seconds)),
                ("Cost rank", lambda tier: tier.rank),
                ("Lends unassigned", lambda tier: "yes" if tier.lends_unassigned else "no"),
                ("Teams", lambda tier: _names(tier.allowed_teams)),
                ("Projects", lambda tier: _names(tier.allowed_projects)),
            ),
            instance_arg="tier",
            create=catalog_services.create_tier,
            update=catalog_services.update_tier,
            delete=catalog_services.delete_tier,
        ),
        Section(
            slug="clusters",
            title="Clusters",
            noun="cluster",
            intro="The Kubernetes clusters whose pools the portal runs work on. A cluster is "
            "registered with a kubeconfig, sealed at once and never shown again; edit a cluster "
            "to replace it or to stop giving it new work. The local cluster is this "
            "deployment's own. Each cluster's GPU activity is read from its Prometheus (or the "
            "PROMETHEUS_URL setting); without it, idle reclaim pauses for the cluster's work.",
            form=ClusterForm,
            queryset=lambda: Cluster.objects.prefetch_related("pools"),
            columns=(
                ("Name", lambda cluster: cluster.name),
                ("Slug", lambda cluster: cluster.slug),
                ("API server", lambda cluster: cluster.api_server or "This deployment's own"),
                ("Scheduler", lambda cluster: cluster.scheduler_mode),
                ("Active", lambda cluster: _yes_no(cluster.is_active)),
                ("Health", _cluster_health),
                (
                    "Prometheus",
                    lambda cluster: cluster.prometheus_url or "The PROMETHEUS_URL setting",
                ),
                ("Pools", lambda cluster: _names(cluster.pools)),
            ),
            instance_arg="cluster",
            create=_register_cluster,
            update=_update_cluster,
            delete=cluster_services.delete_cluster,
        ),
        Section(
            slug="pools",
            title="Node pools",
            noun="node pool",
            intro="Sets of GPU nodes with one tier, one sharing mode and one way of scheduling.",
            form=NodePoolForm,
            queryset=lambda: NodePool.objects.select_related("tier", "cluster").prefetch_related(
                "pilot_teams"
            ),
            columns=(
                ("Name", lambda pool: pool.name),
                ("Tier", lambda pool: pool.tier),
                ("Cluster", lambda pool: pool.cluster),
                ("Sharing", lambda pool: pool.get_sharing_mode_display()),
                ("Placement", lambda pool: pool.get_placement_display()),
                ("Scoring", lambda pool: pool.get_scoring_display()),
                ("Devices", lambda pool: "DRA" if pool.allocation == "dra" else "Device plugin"),
                ("Short reserve", lambda pool: pool.short_reserve_label or "–"),
                ("Pilot", _pilot_label),
            ),
            instance_arg="node_pool",
            create=catalog_services.create_node_pool,
            update=catalog_services.update_node_pool,
            delete=catalog_services.delete_node_pool,
        ),
        Section(
            slug="flavors",
            title="Flavors",
            noun="flavor",
            intro="What requests ask for and what quotas and prices count.",
            form=FlavorForm,
            queryset=lambda: Flavor.objects.select_related("pool").prefetch_related("other_pools"),
            columns=(
                ("Name", lambda flavor: flavor.name),
                ("Pool", lambda flavor: flavor.pool),
                ("Other pools", lambda flavor: _names(flavor.other_pools)),
                ("Kind", lambda flavor: flavor.get_kind_display()),
                ("GPU model", lambda flavor: flavor.gpu_model),
                ("Memory (MiB)", lambda flavor: flavor.gpu_memory_mib),
                ("GPU-equivalent", lambda flavor: format_number(flavor.gpu_equivalent, 4)),
                ("Active", lambda flavor: _yes_no(flavor.is_active)),
            ),
            instance_arg="flavor",
            create=catalog_services.create_flavor,
            update=catalog_services.update_flavor,
            delete=catalog_services.delete_flavor,
        ),
        Section(
            slug="notebook-profiles",
            title="Notebook profiles",
            noun="notebook profile",
            intro="Curated notebook servers developers pick on the request form: an image, the "
            "tiers it may run on and the GPUs it starts with. Once a tier has active profiles, "
            "its notebooks run only their images; a tier without any runs any image.",
            form=NotebookProfileForm,
            queryset=lambda: NotebookProfile.objects.select_related("flavor").prefetch_related(
                "tiers"
            ),
            columns=(
                ("Name", lambda profile: profile.name),
                ("Image", lambda profile: profile.image),
                ("Tiers", lambda profile: _names(profile.tiers)),
                (
                    "Starts with",
                    lambda profile: (
                        f"{profile.flavor} × {profile.gpu_count}"
                        if profile.flavor
                        else f"{profile.gpu_count} GPU(s), flavor of the developer's choice"
                    ),
                ),
                ("Active", lambda profile: _yes_no(profile.is_active)),
            ),
            instance_arg="notebook_profile",
            create=profile_services.create_notebook_profile,
            update=profile_services.update_notebook_profile,
            delete=profile_services.delete_notebook_profile,
        ),
        Section(
            slug="approval-rules",
            title="Approval rules",
            noun="approval rule",
            intro="Per tier: which requests are approved at once and which wait for the lead.",
            form=ApprovalRuleForm,
            queryset=lambda: ApprovalRule.objects.select_related("tier").order_by("tier__name"),
            columns=(
                ("Tier", lambda rule: rule.tier),
                (
                    "Auto within guarantee",
                    lambda rule: _yes_no(rule.auto_approve_within_guaranteed),
                ),
                ("Auto up to priority", lambda rule: rule.get_auto_approve_max_priority_display()),
                ("Lead approves whole cards", lambda rule: _yes_no(rule.lead_approves_whole_cards)),
                ("Expires after", lambda rule: f"{rule.approval_ttl_hours} h"),
            ),
            instance_arg="approval_rule",
            create=catalog_services.create_approval_rule,
            update=catalog_services.update_approval_rule,
            delete=catalog_services.delete_approval_rule,
        ),
        Section(
            slug="quotas",
            title="Team quotas",
            noun="team quota",
            intro="Each team's guaranteed share of a flavor and the limit it may borrow up to. "
            "Team leads split these between their projects on the Quotas page.",
            form=TeamQuotaForm,
            queryset=lambda: Quota.objects.filter(project__isnull=True).select_related(
                "team", "flavor"
            ),
            columns=(
                ("Team", lambda quota: quota.team),
                ("Flavor", lambda quota: quota.flavor),
                ("Guaranteed", lambda quota: quota.guaranteed),
                ("Limit", lambda quota: quota.limit),
            ),
            instance_arg="quota",
            create=catalog_services.set_team_quota,
            update=_update_team_quota,
            delete=catalog_services.delete_team_quota,
        ),
        Section(
            slug="storage-quotas",
            title="Storage quotas",
            noun="storage quota",
            intro="How many GiB of workspace and home volumes each team's projects may claim "
            "(a team without one may claim none). Leads set up workspaces on a project's "
            "Data page.",
            form=StorageQuotaForm,
            queryset=lambda: StorageQuota.objects.select_related("team"),
            columns=(
                ("Team", lambda quota: quota.team),
                ("Limit (GiB)", lambda quota: quota.limit_gib),
                (
                    "Claimed (GiB)",
                    lambda quota: data_services.storage_used_gib(team=quota.team),
                ),
            ),
            instance_arg="quota",
            create=data_services.set_storage_quota,
            update=_update_storage_quota,
            delete=data_services.delete_storage_quota,
        ),
        Section(
            slug="prices",
            title="Prices",
            noun="price",
            intro="The hourly price of one unit of a flavor from a moment on.",
            form=PriceForm,
            queryset=lambda: Price.objects.select_related("flavor"),
            columns=(
                ("Flavor", lambda price: price.flavor),
                (
                    "Per hour",
                    lambda price: f"{format_money(price.price_per_hour)} {price.currency}",
                ),
                ("From", lambda price: format_when(price.effective_from)),
                ("Preemptible ×", lambda price: format_number(price.preemptible_multiplier, 4)),
                ("Priority ×", lambda price: price.priority_multipliers or "–"),
            ),
            instance_arg="price",
            create=price_services.create_price,
            update=price_services.update_price,
            delete=price_services.delete_price,
        ),
        Section(
            slug="resource-prices",
            title="CPU, memory and storage prices",
            noun="resource price",
            intro="The hourly price of a CPU core, a GiB of memory or a GiB of claimed storage "
            "(workspaces and home volumes) from a moment on; requests pay their requested cores "
            "and memory beside their GPUs.",
            form=ResourcePriceForm,
            queryset=lambda: ResourcePrice.objects.all(),
            columns=(
                ("Resource", lambda price: price.get_resource_display()),
                ("Per hour", lambda price: f"{price.price_per_hour} {price.currency}"),
                ("From", lambda price: format_when(price.effective_from)),
            ),
            instance_arg="price",
            create=price_services.create_resource_price,
            update=price_services.update_resource_price,
            delete=price_services.delete_resource_price,
        ),
        Section(
            slug="teams",
            title="Teams",
            noun="team",
            intro="Groups of people that share a GPU quota and a budget.",
            form=TeamForm,
            queryset=lambda: Team.objects.annotate(project_count=Count("projects")),
            columns=(
                ("Name", lambda team: team.name),
                ("Slug", lambda team: team.slug),
                ("Projects", lambda team: team.project_count),
            ),
            instance_arg="team",
            create=create_team,
            update=update_team,
            delete=delete_team,
        ),
        Section(
            slug="projects",
            title="Projects",
            noun="project",
            intro="A team's units of work; each has its own Kubernetes namespace.",
            form=ProjectForm,
            queryset=lambda: Project.objects.select_related("team"),
            columns=(
                ("Team", lambda project: project.team),
                ("Name", lambda project: project.name),
                ("Slug", lambda project: project.slug),
                ("Namespace", lambda project: project.namespace),
            ),
            instance_arg="project",
            create=create_project,
            update=update_project,
            delete=delete_project,
        ),
        Section(
            slug="memberships",
            title="Memberships",
            noun="membership",
            intro="Who holds which role: developer or team lead of a team, finance or platform "
            "admin of the organisation; and each team member's weight in the fair share inside "
            "the team.",
            form=MembershipForm,
            queryset=lambda: Membership.objects.select_related("user", "team"),
            columns=(
                ("User", lambda membership: membership.user.get_username()),
                ("Team", lambda membership: membership.team or "Organisation"),
                ("Role", lambda membership: membership.get_role_display()),
                (
                    "Weight",
                    lambda membership: membership.fair_share_weight if membership.team else "—",
                ),
            ),
            instance_arg="membership",
            create=add_membership,
            update=change_membership,
            delete=remove_membership,
        ),
        Section(
            slug="webhooks",
            title="Webhooks",
            noun="webhook",
            intro="Endpoints that hear every notice the portal sends (approvals, warnings, "
            "budget alerts), each in its receiver's format: a Slack incoming webhook, a "
            "Microsoft Teams workflow, or plain JSON. A URL is never shown again.",
            form=WebhookForm,
            queryset=lambda: Webhook.objects.all(),
            columns=(
                ("Name", lambda webhook: webhook.name),
                ("Format", lambda webhook: webhook.get_payload_format_display()),
                ("Host", lambda webhook: urlsplit(webhook.url).hostname or ""),
                ("Active", lambda webhook: _yes_no(webhook.is_active)),
            ),
            instance_arg="webhook",
            create=webhook_services.create_webhook,
            update=webhook_services.update_webhook,
            delete=webhook_services.delete_webhook,
        ),
    )
}


def _require_platform_admin(request: HttpRequest) -> None:
    """Only platform admins manage the fleet settings; to anyone else the pages do not exist."""
    if not scope_of(request.user).is_platform_admin:
        raise Http404


def _visible(request: HttpRequest, queryset: ScopedQuerySet, pk: int) -> Any:
    """The object if the user is a platform admin who sees it; else 404."""
    found = get_object_or_404(queryset.visible_to(request.user), pk=pk)
    _require_platform_admin(request)
    return found


def _refusal(form: ManageForm, error: DomainError) -> tuple[str, int]:
    """A service's refusal as (message above the form, status); field errors go on the form."""
    if isinstance(error, ForbiddenError | ConflictError):
        return error.message, error.status_code
    form.add_domain_error(error)
    return "", 400


def _list_page(
    request: HttpRequest,
    section: Section,
    *,
    form: ManageForm | None = None,
    refusal: str = "",
    status: int = 200,
) -> HttpResponse:
    rows = [
        (obj, [cell(obj) for _, cell in section.columns])
        for obj in section.queryset().visible_to(request.user)
    ]
    context = {
        "section": section,
        "sections": SECTIONS.values(),
        "headers": [label for label, _ in section.columns],
        "rows": rows,
        "form": form or section.form(),
        "refusal": refusal,
    }
    return render(request, "manage/list.html", context, status=status)


@login_required
def index(request: HttpRequest) -> HttpResponse:
    """The fleet settings: one entry per kind of object, with how many there are."""
    _require_platform_admin(request)
    entries = [
        (section.title, section.list_route, section.queryset().count(), section.intro)
        for section in SECTIONS.values()
    ]
    entries.append(
        (
            "Reclaim policies",
            "manage-reclaim-policies",
            ReclaimPolicy.objects.count(),
            RECLAIM_INTRO,
        )
    )
    return render(request, "manage/index.html", {"entries": entries})


@login_required
@require_http_methods(["GET", "POST"])
def section_list(request: HttpRequest, section: Section) -> HttpResponse:
    """GET: the objects and an empty create form; POST: create through the section's service."""
    _require_platform_admin(request)
    if request.method == "GET":
        return _list_page(request, section)
    form = section.form(request.POST)
    if not form.is_valid():
        return _list_page(request, section, form=form, status=400)
    try:
        created = section.create(actor=request.user, **form.cleaned_data)
    except DomainError as error:
        refusal, status = _refusal(form, error)
        return _list_page(request, section, form=form, refusal=refusal, status=status)
    messages.success(request, f"{section.noun.capitalize()} {created} created.")
    return redirect(section.list_route)


@login_required
@require_http_methods(["GET", "POST"])
def section_edit(request: HttpRequest, section: Section, pk: int) -> HttpResponse:
    """GET: the object's form; POST: change it through the section's update service."""
    current = _visible(request, section.queryset(), pk)
    # The form works on its own copy, so the service still sees the stored values.
    form = section.form(request.POST or None, instance=section.queryset().get(pk=pk))
    refusal, status = "", 200
    if request.method == "POST":
        if form.is_valid():
            try:
                changed = section.update(
                    actor=request.user, **{section.instance_arg: current}, **form.changes()
                )
            except DomainError as error:
                refusal, status = _refusal(form, error)
            else:
                messages.success(request, f"{section.noun.capitalize()} {changed} saved.")
                return redirect(section.list_route)
        else:
            status = 400
    context = {"section": section, "obj": current, "form": form, "refusal": refusal}
    return render(request, "manage/edit.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def section_delete(request: HttpRequest, section: Section, pk: int) -> HttpResponse:
    """GET: ask to confirm; POST: delete through the section's service (409 when in use)."""
    current = _visible(request, section.queryset(), pk)
    refusal, status = "", 200
    if request.method == "POST":
        name = str(current)
        try:
            section.delete(actor=request.user, **{section.instance_arg: current})
        except DomainError as error:  # nothing to put on a form: the message goes above
            refusal, status = error.message, error.status_code
        else:
            messages.success(request, f"{section.noun.capitalize()} {name} deleted.")
            return redirect(section.list_route)
    context = {"section": section, "obj": current, "refusal": refusal}
    return render(request, "manage/delete.html", context, status=status)


# --- Reclaim policies: one per tier, saved (created or changed) through one service ------------

RECLAIM_INTRO = (
    "Per tier: when idle GPUs are warned about and reclaimed, when stuck work times out, how "
    "often lost work is retried. A tier without a policy uses the defaults shown on its form."
)
RECLAIM_COLUMNS: tuple[tuple[str, Cell], ...] = (
    ("Idle under", lambda policy: f"{policy.idle_threshold_percent} %"),
    ("Idle window", lambda policy: format_duration(policy.idle_window_seconds)),
    ("Notebooks", lambda policy: format_duration(policy.notebook_idle_window_seconds)),
    ("Warned before", lambda policy: format_duration(policy.idle_warning_seconds)),
    ("Reclaims idle", lambda policy: _yes_no(policy.reclaim_idle)),
    ("Pending timeout", lambda policy: format_duration(policy.pending_timeout_seconds)),
    ("Attempts", lambda policy: policy.max_attempts),
    ("Notebook keep alive", lambda policy: _keep_alive_label(policy.notebook_keep_alive_seconds)),
)


def _keep_alive_label(seconds: int) -> str:
    return format_duration(seconds) if seconds else "off"


def _tiers() -> ScopedQuerySet:
    return Tier.objects.select_related("reclaim_policy")


def _policy_of(tier: Tier) -> ReclaimPolicy | None:
    return getattr(tier, "reclaim_policy", None)


@login_required
def reclaim_policies(request: HttpRequest) -> HttpResponse:
    """Each tier's reclaim policy, or a note that the tier uses the defaults."""
    _require_platform_admin(request)
    rows = []
    for tier in _tiers().visible_to(request.user):
        policy = _policy_of(tier)
        cells = [cell(policy) for _, cell in RECLAIM_COLUMNS] if policy else None
        rows.append((tier, cells))
    context = {
        "rows": rows,
        "headers": [label for label, _ in RECLAIM_COLUMNS],
        "sections": SECTIONS.values(),
    }
    return render(request, "manage/reclaim_list.html", context)


@login_required
@require_http_methods(["GET", "POST"])
def reclaim_policy_edit(request: HttpRequest, pk: int) -> HttpResponse:
    """A tier's reclaim policy: the stored one or the defaults, saved by `save_reclaim_policy`."""
    tier = _visible(request, _tiers(), pk)
    stored = _policy_of(tier)
    instance = ReclaimPolicy.objects.get(pk=stored.pk) if stored else ReclaimPolicy(tier=tier)
    form = ReclaimPolicyForm(request.POST or None, instance=instance)
    refusal, status = "", 200
    if request.method == "POST":
        if form.is_valid():
            try:
                catalog_services.save_reclaim_policy(
                    actor=request.user, tier=tier, **form.cleaned_data
                )
            except DomainError as error:
                refusal, status = _refusal(form, error)
            else:
                messages.success(request, f"Reclaim policy of {tier} saved.")
                return redirect("manage-reclaim-policies")
        else:
            status = 400
    context = {"tier": tier, "is_stored": stored is not None, "form": form, "refusal": refusal}
    return render(request, "manage/reclaim_edit.html", context, status=status)

"""The `gpuctl` commands: each one or two calls of the portal's REST API, printed for people.

Exit status: 0 done; 1 the API refused (its message is printed) or the request ended otherwise
than waited for; 2 a usage error; 3 `wait` timed out.
"""

from __future__ import annotations

import sys
import time
import webbrowser
from datetime import datetime
from pathlib import Path
from typing import Any

import click
import yaml

from gpuctl import __version__
from gpuctl import notifications as settings_of
from gpuctl.client import ApiError, PortalClient
from gpuctl.config import load_settings, save_settings
from gpuctl.output import FORMATS, key_values, render, table

# Where a request's run is over (as the portal's lifecycle says); `wait` stops there.
FINISHED = frozenset({"succeeded", "failed", "cancelled", "reclaimed", "rejected", "expired"})
WAIT_TIMEOUT_EXIT = 3
REQUEST_COLUMNS = ("id", "name", "status", "kind", "flavor", "gpus", "owner", "created")


class PortalGroup(click.Group):
    """Turns the API's refusals into a printed message and exit status 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ApiError as error:
            raise click.ClickException(str(error)) from error


class WaitTimedOut(click.ClickException):
    exit_code = WAIT_TIMEOUT_EXIT


class BadInput(click.ClickException):
    """A flag's value that cannot be carried out: one line, and click's usage status."""

    exit_code = 2


def portal(ctx: click.Context) -> PortalClient:
    """The API client of this run, made on first use from the environment or config file."""
    root = ctx.find_root()
    if not isinstance(root.obj, PortalClient):
        settings = load_settings()
        if not settings.token:
            raise click.ClickException("Not logged in: run `gpuctl login` or set GPUCTL_TOKEN.")
        root.obj = PortalClient(settings.url, settings.token)
    return root.obj


def output_option(default: str = "table") -> Any:
    return click.option(
        "-o",
        "--output",
        type=click.Choice(FORMATS),
        default=default,
        show_default=True,
        help="How to print: a table for people, JSON or YAML for scripts.",
    )


@click.group(cls=PortalGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpuctl")
def cli() -> None:
    """Request GPUs from the GPU Portal and follow your work, from the shell.

    gpuctl talks to the portal's REST API with a personal token: run `gpuctl login` once, or
    set GPUCTL_URL and GPUCTL_TOKEN.
    """


@cli.command()
@click.option("--url", envvar="GPUCTL_URL", help="The portal, e.g. https://gpus.example.com.")
@click.option("--username", "-u", help="Your portal username (asked when not given).")
@click.option("--password", help="Your password (asked without echo when not given).")
def login(url: str | None, username: str | None, password: str | None) -> None:
    """Sign in and keep a personal API token in the config file (mode 0600)."""
    url = url or load_settings().url or click.prompt("Portal URL")
    username = username or click.prompt("Username")
    password = password or click.prompt("Password", hide_input=True)
    answer = PortalClient(url).login(str(username), str(password))
    path = save_settings(url=str(url), token=answer["token"], expiry=str(answer.get("expiry", "")))
    click.echo(f"Logged in to {url} as {username}; token kept in {path}.")


def _read_body(path: str) -> dict[str, Any]:
    """A request body from a YAML or JSON file (`-`: standard input)."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    try:
        body = yaml.safe_load(text)  # JSON is YAML too
    except yaml.YAMLError as error:
        raise click.ClickException(f"{path} is not YAML or JSON: {error}") from error
    if not isinstance(body, dict):
        raise click.ClickException(f"{path} must hold a mapping of request fields.")
    return body


def _resolve(client: PortalClient, body: dict[str, Any], field: str, path: str) -> None:
    """Let a file name its project or flavor by slug (or name); the API takes ids."""
    value = body.get(field)
    if not isinstance(value, str) or value.isdigit():
        return
    for row in client.list_all(path, page_size=200):
        if value in (row.get("slug"), row.get("name")):
            body[field] = row["id"]
            return
    raise click.ClickException(f"No {field} named {value!r} that you can use.")


def _template(client: PortalClient, wanted: str) -> dict[str, Any]:
    for row in client.list_all("templates/", page_size=200):
        if wanted in (str(row["id"]), row["name"]):
            return row
    raise click.ClickException(f"No template {wanted!r}: see `gpuctl templates`.")


TEMPLATE_BODY_FIELDS = (
    "flavor",
    "gpu_count",
    "gpu_memory_mib",
    "gpu_cores_percent",
    "kind",
    "image",
    "command",
    "env",
    "max_runtime_seconds",
    "priority",
    "is_preemptible",
    "allow_shared_node",
)


@cli.command()
@click.option(
    "-f",
    "--file",
    "path",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="A YAML or JSON file with the API's request fields (`-`: standard input).",
)
@click.option("-t", "--template", help="Start from a saved template (id or name).")
@click.option("--name", help="The request's name (overrides the file's).")
@click.option("--project", help="Project id or slug (overrides the file's).")
@output_option(default="table")
@click.pass_context
def submit(
    ctx: click.Context,
    path: str | None,
    template: str | None,
    name: str | None,
    project: str | None,
    output: str,
) -> None:
    """Submit a GPU request: the same fields as POST /api/v1/requests/.

    \b
    Example request.yaml:
      name: resnet sweep
      project: vision-research     # id or slug
      flavor: a100-80g             # id or slug
      cluster: east                # optional: run only there (slug)
      gpu_count: 1
      kind: job                    # job, notebook or service
      image: pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime
      command: [python, train.py]
      env: {EPOCHS: "3"}
      max_runtime_seconds: 3600
    """
    client = portal(ctx)
    if path is None and template is None:
        raise click.UsageError("Give -f FILE, -t TEMPLATE or both.")
    body: dict[str, Any] = {}
    if template is not None:
        saved = _template(client, template)
        body = {
            field: saved[field] for field in TEMPLATE_BODY_FIELDS if saved.get(field) is not None
        }
        body["name"] = saved["name"]
    if path is not None:
        body.update(_read_body(path))
    if name is not None:
        body["name"] = name
    if project is not None:
        body["project"] = project
    _resolve(client, body, "project", "projects/")
    _resolve(client, body, "flavor", "flavors/")
    created = client.post("requests/", body)
    if output == "table":
        click.echo(f"request {created['id']} submitted: {created['status']}")
        if created.get("status_reason"):
            click.echo(created["status_reason"])
    else:
        click.echo(render(created, output))


def _flavor_names(client: PortalClient) -> dict[int, str]:
    return {row["id"]: row["slug"] for row in client.list_all("flavors/", page_size=200)}


def _request_row(request: dict[str, Any], flavors: dict[int, str]) -> list[Any]:
    return [
        request["id"],
        request.get("name") or "-",
        request["status"],
        request["kind"],
        flavors.get(request["flavor"], request["flavor"]),
        request["gpu_count"],
        request["owner"],
        str(request["created_at"])[:16].replace("T", " "),
    ]


@cli.command(name="ls")
@click.option("--status", "-s", multiple=True, help="Only these states (repeatable).")
@click.option("--mine", is_flag=True, help="Only my own requests (leads see the team's).")
@click.option("--limit", default=50, show_default=True, help="At most this many, newest first.")
@output_option()
@click.pass_context
def list_requests(
    ctx: click.Context, status: tuple[str, ...], mine: bool, limit: int, output: str
) -> None:
    """List the requests you can see, newest first."""
    client = portal(ctx)
    params: dict[str, Any] = {"page_size": max(1, min(limit, 200))}
    if status:
        params["status"] = list(status)
    if mine:
        params["owner"] = client.get("me/")["username"]
    rows = client.get("requests/", **params)["results"][:limit]
    if output != "table":
        click.echo(render(rows, output))
        return
    flavors = _flavor_names(client)
    click.echo(table(REQUEST_COLUMNS, [_request_row(row, flavors) for row in rows]))


@cli.command()
@click.argument("request_id", type=int)
@output_option()
@click.pass_context
def get(ctx: click.Context, request_id: int, output: str) -> None:
    """Show one request: every field the API returns."""
    client = portal(ctx)
    request = client.get(f"requests/{request_id}/")
    if output == "table":
        request = {**request, **_names_of(client, request)}
        # The approving lead by username, where the API gives it (older portals: the id).
        if request.get("approved_by_name"):
            request["approved_by"] = request["approved_by_name"]
        request.pop("approved_by_name", None)
    if output == "table" and isinstance(request.get("blocker"), dict):
        request = {**request, "blocker": blocker_line(request["blocker"])}
    if output == "table" and "cluster" in request and request["cluster"] is None:
        request = {**request, "cluster": "any (the scheduler chooses)"}
    if output == "table" and request.get("estimated_start_at"):
        request = {**request, "likely_start": start_line(request)}
    click.echo(render(request, output))


# Fields that hold another object's id, and where the API names that object.
NAMED_FIELDS = {"team": "teams", "project": "projects", "flavor": "flavors", "cluster": "clusters"}


def _names_of(client: PortalClient, request: dict[str, Any]) -> dict[str, str]:
    """The request's team, project, flavor and cluster by name, as people know them (an object
    the caller may not read keeps its id)."""
    names: dict[str, str] = {}
    for field, path in NAMED_FIELDS.items():
        pk = request.get(field)
        if not isinstance(pk, int):
            continue
        try:
            names[field] = str(client.get(f"{path}/{pk}/")["name"])
        except ApiError:
            continue
    return names


def _clock(moment: str) -> str:
    """An API time as local time: "14:20" today, else "Sat 14:20" (or the date beyond a week)."""
    local = datetime.fromisoformat(moment.replace("Z", "+00:00")).astimezone()
    days = (local.date() - datetime.now().astimezone().date()).days
    if days == 0:
        return local.strftime("%H:%M")
    return local.strftime("%a %H:%M" if 0 < days < 7 else "%d %b %H:%M")


def start_line(request: dict[str, Any]) -> str:
    """A queued request's estimate for a table: "around 14:20, between 14:05 and 15:10"."""
    line = f"around {_clock(request['estimated_start_at'])}"
    low, high = request.get("estimate_low_at"), request.get("estimate_high_at")
    if low and high and low != high:
        line += f", between {_clock(low)} and {_clock(high)}"
    elif low and not high and low != request["estimated_start_at"]:
        line += f", not before {_clock(low)}"
    return line


def blocker_line(blocker: dict[str, Any]) -> str:
    """A request's blocker for a table: "code: message", or "-" when nothing blocks it."""
    if not blocker.get("code"):
        return "-"
    return f"{blocker['code']}: {blocker.get('message', '')}"


@cli.command()
@click.argument("request_id", type=int)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until it stops.")
@click.option("--tail", default=200, show_default=True, help="How many last lines first.")
@click.pass_context
def logs(ctx: click.Context, request_id: int, follow: bool, tail: int) -> None:
    """Print the current attempt's log."""
    client = portal(ctx)
    path = f"requests/{request_id}/logs/"
    if follow:
        for line in client.stream_lines(path, tail=tail, follow=1):
            click.echo(line)
        return
    click.echo(client.text(path, tail=tail), nl=False)


@cli.command()
@click.argument("request_id", type=int)
@output_option()
@click.pass_context
def events(ctx: click.Context, request_id: int, output: str) -> None:
    """The cluster's and the portal's events about a request, oldest first."""
    answer = portal(ctx).get(f"requests/{request_id}/events/")
    if output != "table":
        click.echo(render(answer, output))
        return
    rows = [
        [
            str(event.get("at") or "-")[:19].replace("T", " "),
            event["source"],
            event["type"],
            event["reason"],
            event.get("object") or "-",
            event["message"],
        ]
        for event in answer.get("results", [])
    ]
    click.echo(table(("at", "source", "type", "reason", "object", "message"), rows))
    if answer.get("cluster_error"):
        click.echo(
            f"warning: the cluster's events are missing: {answer['cluster_error']}", err=True
        )


@cli.command()
@click.argument("request_id", type=int)
@click.option(
    "--for",
    "target",
    type=click.Choice(["running", "finished"]),
    default="running",
    show_default=True,
    help="Wait until it runs, or until its run is over.",
)
@click.option("--timeout", default=600.0, show_default=True, help="Give up after so many seconds.")
@click.option("--interval", default=2.0, show_default=True, help="Seconds between two looks.")
@click.pass_context
def wait(ctx: click.Context, request_id: int, target: str, timeout: float, interval: float) -> None:
    """Wait until a request runs or finishes (exit 1 if it ends otherwise, 3 on timeout)."""
    client = portal(ctx)
    deadline = time.monotonic() + timeout
    while True:
        request = client.get(f"requests/{request_id}/")
        status = request["status"]
        if target == "running" and status == "running":
            click.echo(f"request {request_id} is running")
            return
        if status in FINISHED:
            reason = f": {request['status_reason']}" if request.get("status_reason") else ""
            if target == "finished":
                click.echo(f"request {request_id} finished: {status}{reason}")
                if status != "succeeded":
                    ctx.exit(1)
                return
            raise click.ClickException(f"request {request_id} ended {status}{reason}")
        if time.monotonic() >= deadline:
            raise WaitTimedOut(f"timed out after {timeout:g} s: request {request_id} is {status}")
        time.sleep(max(0.1, min(interval, deadline - time.monotonic())))


@cli.command()
@click.argument("request_id", type=int)
@click.option("--reason", default="", help="Why, for the request's history.")
@click.pass_context
def cancel(ctx: click.Context, request_id: int, reason: str) -> None:
    """Cancel a request: it leaves the queue, or its workload is stopped."""
    answer = portal(ctx).post(f"requests/{request_id}/cancel/", {"reason": reason})
    click.echo(f"request {request_id} {answer['status']}")


@cli.command()
@click.argument("request_id", type=int)
@output_option()
@click.pass_context
def resubmit(ctx: click.Context, request_id: int, output: str) -> None:
    """Submit a finished request's body again, as a new request."""
    created = portal(ctx).post(f"requests/{request_id}/resubmit/")
    if output == "table":
        click.echo(f"request {created['id']} submitted: {created['status']}")
    else:
        click.echo(render(created, output))


@cli.command(name="open")
@click.argument("request_id", type=int)
@click.option("--browser", is_flag=True, help="Also open it in the web browser.")
@click.pass_context
def open_workload(ctx: click.Context, request_id: int, browser: bool) -> None:
    """Print the URL that opens a running notebook or service (through the portal, on its own
    host)."""
    request = portal(ctx).get(f"requests/{request_id}/")
    url = request.get("connect_url")
    if not url:
        raise click.ClickException(
            f"request {request_id} has no URL to open ({request['kind']}, {request['status']}): "
            "notebooks and services get one while they run."
        )
    click.echo(url)
    if browser:
        webbrowser.open(url)


@cli.command()
@output_option()
@click.pass_context
def quota(ctx: click.Context, output: str) -> None:
    """Your teams' quotas per flavor, their split over projects and what is in use.

    The figures are the portal's own (the quota page's and the API's): used by running work,
    queued, borrowed above the guarantee, in the unit the last column names.
    """
    client = portal(ctx)
    rows = client.list_all("quotas/", page_size=200)
    if output != "table":
        click.echo(render(rows, output))
        return
    teams = {row["id"]: row["slug"] for row in client.list_all("teams/", page_size=200)}
    projects = {row["id"]: row["slug"] for row in client.list_all("projects/", page_size=200)}
    flavors = _flavor_names(client)
    click.echo(table(QUOTA_COLUMNS, quota_lines(rows, teams, projects, flavors)))


QUOTA_COLUMNS = (
    "team",
    "project",
    "flavor",
    "guaranteed",
    "limit",
    "used",
    "queued",
    "borrowed",
    "unit",
)


def quota_lines(
    rows: list[dict[str, Any]],
    teams: dict[Any, Any],
    projects: dict[Any, Any],
    flavors: dict[Any, Any],
) -> list[list[Any]]:
    """The `gpuctl quota` table's rows, one per quota of the API's list."""
    return [
        [
            teams.get(row["team"], row["team"]),
            projects.get(row["project"], row["project"]) if row["project"] else "(team)",
            flavors.get(row["flavor"], row["flavor"]),
            row["guaranteed"],
            row["limit"],
            row["used"],
            row.get("queued", ""),
            row.get("borrowed", ""),
            row.get("unit", ""),
        ]
        for row in rows
    ]


@cli.command()
@output_option()
@click.pass_context
def templates(ctx: click.Context, output: str) -> None:
    """Saved request templates: your team's first, then your own (`submit -t ID` uses one)."""
    client = portal(ctx)
    rows = client.list_all("templates/", page_size=200)
    if output != "table":
        click.echo(render(rows, output))
        return
    flavors = _flavor_names(client)
    lines = [
        [
            row["id"],
            row["name"],
            "team" if row["is_shared"] else "mine",
            row["kind"],
            flavors.get(row["flavor"], row["flavor"]),
            row["gpu_count"],
            row["image"],
        ]
        for row in rows
    ]
    click.echo(table(("id", "name", "scope", "kind", "flavor", "gpus", "image"), lines))


@cli.command(name="what-if")
@click.option("--project", required=True, help="Project id or slug.")
@click.option("--gpus", "gpu_count", type=int, default=1, show_default=True)
@click.option(
    "--max-runtime",
    "max_runtime_seconds",
    type=int,
    default=7200,
    show_default=True,
    help="Seconds.",
)
@click.option("--kind", default="job", show_default=True, help="job, notebook or service.")
@output_option()
@click.pass_context
def what_if(
    ctx: click.Context,
    project: str,
    gpu_count: int,
    max_runtime_seconds: int,
    kind: str,
    output: str,
) -> None:
    """When a request submitted now would likely start, for each flavor you may use."""
    client = portal(ctx)
    query: dict[str, Any] = {"project": project}
    _resolve(client, query, "project", "projects/")
    rows = client.get(
        "requests/what-if/",
        project=query["project"],
        gpu_count=gpu_count,
        max_runtime_seconds=max_runtime_seconds,
        kind=kind,
    )
    if output != "table":
        click.echo(render(rows, output))
        return
    lines = [[row["flavor_name"], _when(row)] for row in rows]
    click.echo(table(("flavor", "likely start"), lines))


def _when(row: dict[str, Any]) -> str:
    """ "now", "in about 40 min, around 14:20", or "not foreseeable" for a what-if row."""
    if row["estimated_start_at"] is None:
        return "not foreseeable (long queue or no quota)"
    minutes = round((row["wait_seconds"] or 0) / 60)
    if minutes < 1:
        return "now"
    return f"in about {minutes} min, around {_clock(row['estimated_start_at'])}"


# The states in which a notebook holds its GPUs (and may be kept alive).
LIVE = ("launching", "running")


def _my_notebook(client: PortalClient, wanted: str) -> int:
    """A request id as given, or the id of the caller's one live notebook of that name."""
    if wanted.isdigit():
        return int(wanted)
    rows = client.list_all(
        "requests/",
        owner=client.get("me/")["username"],
        kind="notebook",
        status=list(LIVE),
        page_size=200,
    )
    ids = sorted(row["id"] for row in rows if row.get("name") == wanted)
    if not ids:
        raise click.ClickException(
            f"No running notebook of yours named {wanted!r}: see `gpuctl ls --mine -s running`."
        )
    if len(ids) > 1:
        listed = ", ".join(str(pk) for pk in ids)
        raise click.ClickException(
            f"{len(ids)} notebooks are named {wanted!r} ({listed}): give the id."
        )
    return ids[0]


def request_label(request: dict[str, Any]) -> str:
    """A request as people know it: its name, else "request 12"."""
    return str(request.get("name") or f"request {request['id']}")


@cli.command(name="keep-alive")
@click.argument("request")
@output_option()
@click.pass_context
def keep_alive(ctx: click.Context, request: str, output: str) -> None:
    """Hold a running notebook's idle reclaim off for the tier's keep-alive span from now.

    REQUEST is the notebook's id, or the name of your one running notebook so named. Only its
    owner keeps a notebook alive; a longer exemption your lead gave is kept.
    """
    client = portal(ctx)
    kept = client.post(f"requests/{_my_notebook(client, request)}/keep-alive/")
    if output != "table":
        click.echo(render(kept, output))
        return
    until = kept.get("idle_exempt_until")
    when = f"not reclaimed for idling before {_clock(until)}" if until else "kept alive"
    click.echo(f"{request_label(kept)} kept alive: {when}")


@cli.group(cls=PortalGroup)
def notifications() -> None:
    """Which notices reach you, and where: the portal's inbox, email, your webhook."""


SETTINGS_PATH = "me/notification-settings/"


def _print_settings(answer: dict[str, Any], output: str) -> None:
    if output != "table":
        click.echo(render(answer, output))
        return
    click.echo(key_values(settings_of.channel_lines(answer)))
    click.echo()
    click.echo(table(settings_of.TOPIC_COLUMNS, settings_of.topic_rows(answer)))


@notifications.command(name="show")
@output_option()
@click.pass_context
def notifications_show(ctx: click.Context, output: str) -> None:
    """Your notification settings: the channels, then each topic on or off per channel."""
    _print_settings(portal(ctx).get(SETTINGS_PATH), output)


@notifications.command(name="set")
@click.option(
    "--channel",
    "channels",
    multiple=True,
    metavar="CHANNEL=on|off",
    help="email=on|off switches email; webhook=off forgets your webhook (repeatable).",
)
@click.option(
    "--topic",
    "topics",
    multiple=True,
    metavar="[CHANNEL:]TOPIC=on|off",
    help="A topic on every channel, or on one: preempted=off, email:started=on (repeatable).",
)
@click.option("--webhook-url", help='Your webhook: https to a public address; "" for none.')
@click.option(
    "--webhook-format",
    type=click.Choice(["json", "slack", "teams"]),
    help="What your webhook's receiver expects.",
)
@output_option()
@click.pass_context
def notifications_set(
    ctx: click.Context,
    channels: tuple[str, ...],
    topics: tuple[str, ...],
    webhook_url: str | None,
    webhook_format: str | None,
    output: str,
) -> None:
    """Change your notification settings; what you do not name stays as it is.

    \b
    Examples:
      gpuctl notifications set --channel email=off
      gpuctl notifications set --topic preempted=on --topic email:started=off
      gpuctl notifications set --webhook-url https://hooks.slack.com/... --webhook-format slack
    Topics: see `gpuctl notifications show`. Channels: in_app, email, webhook.
    """
    if not (channels or topics or webhook_url is not None or webhook_format):
        raise BadInput("Nothing to change: give --channel, --topic or --webhook-url.")
    try:
        channel_switches = [settings_of.parse_channel(text) for text in channels]
        topic_switches = [settings_of.parse_topic(text) for text in topics]
    except settings_of.SettingError as error:
        raise BadInput(str(error)) from error
    client = portal(ctx)
    current = client.get(SETTINGS_PATH)
    try:
        body = settings_of.changes(
            current,
            channels=channel_switches,
            topics=topic_switches,
            webhook_url=webhook_url,
            webhook_format=webhook_format,
        )
    except settings_of.SettingError as error:
        raise BadInput(str(error)) from error
    answer = client.call("PATCH", SETTINGS_PATH, body=body).json()
    for topic in settings_of.always_in_inbox(current, topic_switches):
        click.echo(f"note: {topic} always reaches the portal's inbox.", err=True)
    _print_settings(answer, output)


def main() -> None:
    cli(prog_name="gpuctl")

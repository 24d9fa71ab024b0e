"""gpuctl end to end: a live portal (pytest-django's `live_server`), gpuctl in its own process.

The scheduling cycle, the launch and the running report are run in the test's process (the
same steps as the worker's tasks, on the simulated cluster) while `gpuctl wait` polls the API.
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
import yaml
from click.testing import CliRunner
from knox.models import AuthToken

from gpuctl.cli import cli
from scheduling.models import GpuRequest
from scheduling.services.requests import GpuRequestSpec, submit_gpu_request
from scheduling.services.templates import create_request_template
from tests.cli.conftest import GPUCTL_TIMEOUT_SECONDS, Gpuctl, gpuctl_command
from tests.support.factories import GpuRequestFactory, admit, launch, report_running
from tests.support.fleet import Fleet
from tests.support.personas import Org

pytestmark = pytest.mark.integration

REQUEST_YAML = """\
name: resnet notebook
project: a-one        # a slug: gpuctl looks up the id
flavor: l4-12g
gpu_count: 1
kind: notebook
image: registry.example.com/ml/notebook:2.4
env:
  EPOCHS: "3"
max_runtime_seconds: 3600
reason: trying gpuctl
"""


def browser(url: str, username: str) -> requests.Session:
    """A session signed in through the portal's login page, as a browser is."""
    session = requests.Session()
    session.get(f"{url}/login/", timeout=30)
    answer = session.post(
        f"{url}/login/",
        data={
            "username": username,
            "password": f"pw-{username}",
            "csrfmiddlewaretoken": session.cookies["csrftoken"],
        },
        headers={"Referer": f"{url}/login/"},
        timeout=30,
    )
    assert answer.ok and "sessionid" in session.cookies, answer.status_code
    return session


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_every_command_has_help() -> None:
    runner = CliRunner()
    top = runner.invoke(cli, ["--help"])
    assert top.exit_code == 0 and "Commands:" in top.output
    expected = {"login", "submit", "ls", "get", "logs", "events", "wait", "cancel", "open"}
    assert expected | {"quota", "templates", "resubmit"} <= set(cli.commands)
    for name in cli.commands:
        answer = runner.invoke(cli, [name, "--help"])
        assert answer.exit_code == 0, name
        assert answer.output.startswith(f"Usage: cli {name}"), answer.output


def test_gpuctl_is_installed_with_the_project() -> None:
    assert Path(gpuctl_command()[0]).name == "gpuctl", "pip install -e . puts gpuctl on the path"


def test_login_keeps_a_token_readable_by_the_owner_only(gpuctl: Gpuctl, org: Org) -> None:
    done = gpuctl("login", "--url", gpuctl.url, input="dev_a\npw-dev_a\n")
    assert done.returncode == 0, done.stderr
    assert "as dev_a" in done.stdout
    assert stat.S_IMODE(os.stat(gpuctl.config).st_mode) == 0o600
    assert "token = " in gpuctl.config.read_text()
    refused = gpuctl("login", "--url", gpuctl.url, input="dev_a\nwrong\n")
    assert refused.returncode == 1
    assert "Unable to log in" in refused.stderr or "credentials" in refused.stderr.lower()


def test_logging_in_again_from_one_machine_keeps_one_token(gpuctl: Gpuctl, org: Org) -> None:
    for _ in range(2):
        done = gpuctl("login", "--url", gpuctl.url, input="dev_a\npw-dev_a\n")
        assert done.returncode == 0, done.stderr
    names = list(AuthToken.objects.filter(user=org.dev_a).values_list("label__name", flat=True))
    assert names == [f"gpuctl on {socket.gethostname()}"[:64]]


def test_a_developer_drives_a_notebook_through_gpuctl(
    logged_in: Callable[[str], Gpuctl], fleet: Fleet, tmp_path: Path
) -> None:
    gpuctl = logged_in("dev_a")

    # Submit from a YAML file, find it listed.
    submitted = gpuctl("submit", "-f", write(tmp_path / "request.yaml", REQUEST_YAML))
    assert submitted.returncode == 0, submitted.stderr
    request = GpuRequest.objects.get()
    assert submitted.stdout.startswith(f"request {request.pk} submitted: queued")
    assert request.name == "resnet notebook" and request.flavor == fleet.l4_12g
    listed = gpuctl("ls")
    assert listed.stdout.splitlines()[0].split()[:4] == ["ID", "NAME", "STATUS", "KIND"]
    row = listed.stdout.splitlines()[1].split()
    assert row[:3] == [str(request.pk), "resnet", "notebook"] and row[5:7] == ["l4-12g", "1"]

    # Read it back three ways.
    as_json = json.loads(gpuctl("get", str(request.pk), "-o", "json").stdout)
    assert as_json["id"] == request.pk and as_json["env"] == {"EPOCHS": "3"}
    as_yaml = yaml.safe_load(gpuctl("get", str(request.pk), "-o", "yaml").stdout)
    assert as_yaml == as_json | {"updated_at": as_yaml["updated_at"]}
    as_table = gpuctl("get", str(request.pk)).stdout
    assert any(line.split() == ["name", "resnet", "notebook"] for line in as_table.splitlines())
    # The table names what the API gives as ids, as people know them.
    fields = (line.partition(" ") for line in as_table.splitlines())
    named = {field: value.strip() for field, _, value in fields}
    assert named["project"] == request.project.name and named["flavor"] == fleet.l4_12g.name
    assert named["team"] == request.team.name

    # Wait for it to run while the cycle admits it (the test settings run the cycle and the
    # launch at once after a submission) and the cluster reports its pod running.
    waiting = gpuctl.popen("wait", str(request.pk), "--for", "running", "--interval", "0.2")
    request.refresh_from_db()
    if request.status == "queued":
        admit(request)
    if request.status == "admitted":
        launch(request)
    report_running(request)
    out, err = waiting.communicate(timeout=GPUCTL_TIMEOUT_SECONDS)
    assert waiting.returncode == 0, err
    assert out.strip() == f"request {request.pk} is running"

    # Open: the portal's /connect/ URL, which sends who may see it on to the workload's own
    # host with a one-use link; logs, events.
    opened = gpuctl("open", str(request.pk))
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout.strip() == f"{gpuctl.url}/connect/{request.pk}/"
    owner, outsider = browser(gpuctl.url, "dev_a"), browser(gpuctl.url, "dev_b")
    link = owner.get(opened.stdout.strip(), timeout=30, allow_redirects=False)
    assert link.status_code == 302
    assert f"{request.pk}.workloads.localhost" in link.headers["Location"]
    assert outsider.get(opened.stdout.strip(), timeout=30).status_code == 404
    # The portal's session is no credential for the Ingress's check (the workload cookie is).
    check = f"{gpuctl.url}/auth/workloads/{request.pk}/"
    assert owner.get(check, timeout=30).status_code == 401
    # The simulated pod starts a few seconds after its launch (the running report above does not
    # move the simulated clock) and then writes a line every 5 s; a tail of 100 holds the first.
    deadline = time.monotonic() + 60
    while True:
        logs = gpuctl("logs", str(request.pk), "--tail", "100")
        assert logs.returncode == 0, logs.stderr
        if logs.stdout or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert "Jupyter Server is running" in logs.stdout
    events = gpuctl("events", str(request.pk))
    assert events.returncode == 0, events.stderr
    assert events.stdout.splitlines()[0].split()[:3] == ["AT", "SOURCE", "TYPE"]
    assert "portal" in events.stdout

    # Cancel; waiting for the end now reports how it ended, non-zero as it did not succeed.
    cancelled = gpuctl("cancel", str(request.pk), "--reason", "done for today")
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"request {request.pk} cancelled"
    ended = gpuctl("wait", str(request.pk), "--for", "finished", "--timeout", "5")
    assert ended.returncode == 1 and "finished: cancelled" in ended.stdout

    # Resubmit the same body as a new request.
    again = gpuctl("resubmit", str(request.pk))
    assert again.returncode == 0, again.stderr
    assert GpuRequest.objects.filter(name="resnet notebook").count() == 2


def test_errors_print_the_api_message_and_exit_non_zero(
    logged_in: Callable[[str], Gpuctl], org: Org, fleet: Fleet, tmp_path: Path
) -> None:
    gpuctl = logged_in("dev_a")
    over_tier = REQUEST_YAML.replace("3600", str(30 * 24 * 3600))
    refused = gpuctl("submit", "-f", write(tmp_path / "tier.yaml", over_tier))
    assert refused.returncode == 1
    assert re.fullmatch(r"Error: The .+ tier allows at most \d+ seconds\.\n", refused.stderr)
    over_api = json.dumps(yaml.safe_load(REQUEST_YAML.replace("3600", str(400 * 24 * 3600))))
    refused = gpuctl("submit", "-f", write(tmp_path / "long.json", over_api))
    assert refused.returncode == 1
    assert refused.stderr == (
        "Error: max_runtime_seconds: Ensure this value is less than or equal to 7776000.\n"
    )
    assert not GpuRequest.objects.exists()

    missing = gpuctl("get", "999999")
    assert missing.returncode == 1 and "Not found" in missing.stderr

    theirs = submit_gpu_request(
        actor=org.dev_b,
        spec=GpuRequestSpec(
            project=org.project_b,
            flavor=fleet.l4_6g,
            gpu_count=1,
            image="registry.example.com/ml/pytorch:2.4",
            max_runtime_seconds=3600,
        ),
    )
    for command in (("get",), ("cancel",), ("logs",), ("events",), ("open",), ("resubmit",)):
        other_tenant = gpuctl(*command, str(theirs.pk))
        assert other_tenant.returncode == 1, command
        assert "Not found" in other_tenant.stderr, (command, other_tenant.stderr)

    timed_out = gpuctl("wait", str(GpuRequest.objects.get(owner=org.dev_b).pk), "--timeout", "1")
    assert timed_out.returncode == 1  # not found beats waiting
    mine = gpuctl("submit", "-f", write(tmp_path / "ok.yaml", REQUEST_YAML))
    assert mine.returncode == 0, mine.stderr
    request_id = mine.stdout.split()[1]
    slow = gpuctl("wait", request_id, "--timeout", "0.5", "--interval", "0.1")
    assert slow.returncode == 3 and "timed out after 0.5 s" in slow.stderr

    # A token revoked elsewhere (the tokens page, an admin): say what to do, not "HTTP 401".
    AuthToken.objects.filter(user=org.dev_a).delete()
    revoked = gpuctl("ls")
    assert revoked.returncode == 1
    assert revoked.stderr.endswith(
        "The portal no longer accepts your token: run `gpuctl login`.\n"
    ), revoked.stderr


def test_templates_quota_and_a_token_from_the_environment(
    gpuctl: Gpuctl, org: Org, fleet: Fleet
) -> None:
    create_request_template(
        actor=org.lead_a,
        team=org.team_a,
        is_shared=True,
        name="team notebook",
        flavor=fleet.l4_12g,
        kind="notebook",
        image="registry.example.com/ml/notebook:2.4",
        max_runtime_seconds=3600,
    )
    gpuctl.login("dev_a")
    token = gpuctl.config.read_text().split("token = ")[1].split()[0]
    gpuctl.config.unlink()
    gpuctl.env.update(GPUCTL_URL=gpuctl.url, GPUCTL_TOKEN=token)

    listed = gpuctl("templates")
    assert listed.returncode == 0, listed.stderr
    assert "team notebook  team   notebook  l4-12g" in listed.stdout
    submitted = gpuctl("submit", "-t", "team notebook", "--project", "a-one")
    assert submitted.returncode == 0, submitted.stderr
    request = GpuRequest.objects.get()
    assert (request.name, request.kind, request.project) == (
        "team notebook",
        "notebook",
        org.project_a,
    )

    quota = gpuctl("quota")
    assert quota.returncode == 0, quota.stderr
    assert quota.stdout.splitlines()[0].split() == [
        "TEAM",
        "PROJECT",
        "FLAVOR",
        "GUARANTEED",
        "LIMIT",
        "USED",
        "QUEUED",
        "BORROWED",
        "UNIT",
    ]
    assert any(
        line.split()[:3] == ["team-a", "(team)", "l4-12g"] for line in quota.stdout.splitlines()
    )

    gpuctl.env["GPUCTL_TOKEN"] = "not-a-token"
    refused = gpuctl("ls")
    assert refused.returncode == 1 and "Invalid token" in refused.stderr
    assert "run `gpuctl login`" in refused.stderr


def test_gpuctl_get_names_the_lead_who_approved_it(
    logged_in: Callable[[str], Gpuctl], org: Org, fleet: Fleet
) -> None:
    # Whole A100 cards need a lead's approval: the factory has lead_a approve it.
    request = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, to="queued")
    assert request.approved_by == org.lead_a
    gpuctl = logged_in("dev_a")
    as_table = gpuctl("get", str(request.pk))
    assert as_table.returncode == 0, as_table.stderr
    fields = (line.partition(" ") for line in as_table.stdout.splitlines())
    named = {field: value.strip() for field, _, value in fields}
    assert named["approved_by"] == org.lead_a.username
    assert (named["project"], named["flavor"]) == (org.project_a.name, fleet.a100.name)
    assert "approved_by_name" not in named
    # The API keeps the id and adds the name beside it.
    as_json = json.loads(gpuctl("get", str(request.pk), "-o", "json").stdout)
    assert as_json["approved_by"] == org.lead_a.pk
    assert as_json["approved_by_name"] == org.lead_a.username

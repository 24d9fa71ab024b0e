"""docker-compose.yml, the Makefile and the README stay in step with the project."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from django.conf import settings

from tests.support.web_server import gunicorn_app

ROOT = Path(settings.BASE_DIR)


def test_compose_has_the_production_services() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert {"postgres", "redis", "web", "worker", "beat", "migrate"} <= set(compose["services"])


def test_every_compose_command_exists_in_the_project() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    from celery import current_app
    from django.core.management import get_commands

    for name in ("web", "worker", "beat", "migrate"):
        command = compose["services"][name]["command"]
        if command[:2] == ["python", "manage.py"]:
            assert command[2] in get_commands(), f"{name}: unknown management command"
        elif command[0] == "gunicorn":
            assert callable(gunicorn_app(command))
        elif command[0] == "celery":
            assert command[1:3] == ["-A", "portal"]
            assert current_app.main == "portal"
            assert command[3] in {"worker", "beat"}
        else:
            raise AssertionError(f"{name}: unexpected command {command}")
    for service in ("web", "worker", "beat", "migrate"):
        environment = compose["services"][service]["environment"]
        assert {"DATABASE_URL", "REDIS_URL", "SECRET_KEY"} <= set(environment)


def test_readme_commands_are_make_targets() -> None:
    makefile = (ROOT / "Makefile").read_text()
    readme = (ROOT / "README.md").read_text()
    for target in set(re.findall(r"`make ([a-z-]+)`", readme)):
        assert re.search(rf"^{target}:", makefile, re.M), f"README names missing target {target}"


def test_ci_runs_the_readme_test_command() -> None:
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_image_runs_as_non_root_with_static_files_collected_at_build() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    final_stage = dockerfile.rsplit("\nFROM ", 1)[1]
    assert "collectstatic --noinput" in final_stage
    users = re.findall(r"^USER (\S+)", final_stage, re.M)
    assert users and users[-1].split(":")[0] not in {"root", "0"}


def test_build_context_leaves_out_local_secrets_and_environments() -> None:
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".env", ".venv", "node_modules", ".git", "var"} <= ignored


def test_compose_runs_exactly_one_beat_and_checks_web_health() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert compose["services"]["beat"]["deploy"]["replicas"] == 1
    assert "/healthz" in " ".join(compose["services"]["web"]["healthcheck"]["test"])

"""The engine is a pure library: no Django, no sibling project packages, no clock, no randomness."""

from __future__ import annotations

import ast
from pathlib import Path

import scheduling.engine

PACKAGE = Path(scheduling.engine.__file__).parent
PROJECT_PACKAGES = {"portal", "tenants", "accounting", "scheduling", "bench", "tests"}
FORBIDDEN_MODULES = {
    "django",
    "rest_framework",
    "celery",
    "time",
    "random",
    "secrets",
    "uuid",
    "datetime",
    "os",
    "io",
    "socket",
    "pathlib",
    "subprocess",
    "threading",
    "asyncio",
    "kubernetes",
    "redis",
    "psycopg",
}
FORBIDDEN_CALLS = {"open", "input", "print", "exec", "eval", "__import__"}


def _modules() -> list[Path]:
    files = sorted(PACKAGE.rglob("*.py"))
    assert files, "engine package has no modules"
    return files


def _imports(path: Path) -> list[tuple[str, int]]:
    """Absolute module names imported by `path` (relative imports resolve inside the package)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((a.name, 0) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            out.append((node.module or "", node.level))
    return out


def test_engine_imports_neither_django_nor_sibling_project_packages() -> None:
    offenders = []
    for path in _modules():
        for name, level in _imports(path):
            if level > 0:
                # Relative imports must stay inside scheduling.engine (level 1 = same package).
                if level > 1 + len(path.relative_to(PACKAGE).parts) - 1:
                    offenders.append(f"{path.name}: relative import escapes package ({name})")
                continue
            top = name.split(".")[0]
            if top in PROJECT_PACKAGES and not name.startswith("scheduling.engine"):
                offenders.append(f"{path.name}: imports project package {name}")
            if top in FORBIDDEN_MODULES:
                offenders.append(f"{path.name}: imports {name}")
    assert offenders == []


def test_engine_has_no_io_clock_or_randomness_calls() -> None:
    offenders = []
    for path in _modules():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                fn = node.func
                if isinstance(fn, ast.Name) and fn.id in FORBIDDEN_CALLS:
                    offenders.append(f"{path.name}:{node.lineno} calls {fn.id}()")
                if isinstance(fn, ast.Attribute) and fn.attr in {"now", "utcnow", "today"}:
                    offenders.append(f"{path.name}:{node.lineno} calls .{fn.attr}()")
    assert offenders == []


def test_engine_modules_stay_small() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in _modules()}
    assert all(n <= 600 for n in sizes.values()), sizes

"""How gpuctl prints: aligned tables for people, JSON and YAML for scripts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import yaml

FORMATS = ("table", "json", "yaml")


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return " ".join(cell(item) for item in value) or "-"
    if isinstance(value, dict):
        return ",".join(f"{key}={item}" for key, item in value.items()) or "-"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns padded to their widest cell, headers in capitals."""
    texts = [[cell(value) for value in row] for row in rows]
    widths = [len(header) for header in headers]
    for row in texts:
        widths = [max(width, len(text)) for width, text in zip(widths, row, strict=True)]
    lines = [[header.upper() for header in headers], *texts]
    return "\n".join(
        "  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def key_values(data: dict[str, Any]) -> str:
    """One `field: value` line per field, for a single object."""
    width = max((len(key) for key in data), default=0)
    return "\n".join(f"{key.ljust(width)}  {cell(value)}" for key, value in data.items())


def render(data: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(data, indent=2, sort_keys=False)
    if fmt == "yaml":
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip()
    if isinstance(data, dict):
        return key_values(data)
    return cell(data)

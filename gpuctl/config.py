"""Where gpuctl finds the portal and its token: the environment first, then the config file.

`GPUCTL_URL` and `GPUCTL_TOKEN` win over the file; the file is `$GPUCTL_CONFIG`, else
`$XDG_CONFIG_HOME/gpuctl/config`, else `~/.config/gpuctl/config`, an INI file with one
`[portal]` section written by `gpuctl login` (mode 0600: it holds a token).
"""

from __future__ import annotations

import configparser
import os
from dataclasses import dataclass
from pathlib import Path

SECTION = "portal"


@dataclass(frozen=True, slots=True)
class Settings:
    url: str
    token: str
    path: Path


def config_path() -> Path:
    explicit = os.environ.get("GPUCTL_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpuctl" / "config"


def load_settings() -> Settings:
    """The portal's URL and the token, from the environment or else the config file."""
    path = config_path()
    parser = configparser.ConfigParser()
    if path.exists():
        parser.read(path, encoding="utf-8")
    stored = parser[SECTION] if parser.has_section(SECTION) else {}
    url = os.environ.get("GPUCTL_URL") or stored.get("url", "")
    token = os.environ.get("GPUCTL_TOKEN") or stored.get("token", "")
    return Settings(url=url.rstrip("/"), token=token, path=path)


def save_settings(*, url: str, token: str, expiry: str = "") -> Path:
    """Write the config file readable by its owner only (the directory too), and answer it."""
    path = config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    parser = configparser.ConfigParser()
    parser[SECTION] = {"url": url.rstrip("/"), "token": token, "expiry": expiry}
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        parser.write(handle)
    path.chmod(0o600)  # an older file keeps its mode through O_CREAT: set it again
    return path

"""The one cache root every cache lives under (pristine releases, results, bundles, base commits)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The cache root: ``$HQP_CACHE``, else ``$XDG_CACHE_HOME/hyperqwen-patches``, else ``~/.cache/...``."""
    if os.environ.get("HQP_CACHE"):
        return Path(os.environ["HQP_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg or Path.home() / ".cache") / "hyperqwen-patches"

"""The result cache for git output computed in a scratch view of our own (format-patch text, binary
paths): there it is pure in ``git --version`` and the arguments; in anyone else's repository, whose
attributes can change it, it is always computed."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from hyperqwen_patches import gitrun, resultcache

# Bump when what a cached export result (format-patch output, binary paths) means changes.
RESULT_VERSION = "1"


def cached_in_scratch(
    scratch: bool, name: str, parts: list[str], compute: Callable[[], Any]
) -> Any:
    """``compute()``, through the result cache when it runs in a scratch view of our own (where its
    output is pure in ``git --version`` and ``parts``); always computed in anyone else's repository."""
    if not scratch:
        return compute()
    return resultcache.cached(name, RESULT_VERSION, [gitrun.version(), *parts], compute)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")

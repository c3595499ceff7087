"""A content-addressed cache of pure static check results, under the tool's cache dir.

A result is stored under ``<cache>/results/<name>/<sha256>.json`` where the sha256 covers the check's
name, a version constant of the check's logic (bumped whenever what the check computes changes), the
interpreter or tool version the result depends on, and the exact input bytes. The same inputs always
give the same result, so an entry never goes stale: a changed input is a different key. Only pure
results are cached (what ``compile()`` says of some bytes, what ``git apply --check`` says of a set of
files and patches, the parse of ``vllm/envs.py``); what a check makes of them for a given series (which
row to blame) is computed on every run.

Writes are atomic (a temporary file in the same directory, renamed into place), so a reader sees a
whole entry or none. An entry that cannot be read or decoded, or whose stored key does not match, is
ignored and recomputed, never trusted; a cache dir that cannot be written only costs the speed-up.
``HQP_RESULT_CACHE=0`` turns the cache off (every result is computed; nothing is read or written).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path

TYPE_CHECKING = False  # not typing's: a plain run never imports typing (a few ms of every start)
if TYPE_CHECKING:
    from typing import Any


try:  # CPython's built-in SHA-256: hashlib's first import loads OpenSSL (2 ms of every start)
    from _sha2 import sha256  # 3.12+
except ImportError:
    try:
        from _sha256 import sha256  # type: ignore[no-redef]  # 3.11
    except ImportError:
        from hashlib import sha256  # type: ignore[assignment]  # other interpreters


SUBDIR = "results"
DISABLE_ENV = "HQP_RESULT_CACHE"


def enabled() -> bool:
    return os.environ.get(DISABLE_ENV, "1") != "0"


def root() -> Path:
    from hyperqwen_patches.cachedir import cache_dir

    return cache_dir() / SUBDIR


def key(name: str, version: str, parts: Iterable[bytes | str]) -> str:
    """sha256 over the name, the logic version and every part, each length-prefixed (unambiguous)."""
    h = sha256()
    for part in (name, version, *parts):
        data = part.encode("utf-8") if isinstance(part, str) else part
        h.update(b"%d:" % len(data))
        h.update(data)
    return h.hexdigest()


def _path(name: str, digest: str) -> Path:
    return root() / name / f"{digest}.json"


def load(name: str, digest: str) -> Any | None:
    """The stored value, or None for a miss (absent, unreadable, corrupt, or another key's entry)."""
    import json

    if not enabled():
        return None
    try:
        with open(_path(name, digest), "rb") as fh:
            doc = json.loads(fh.read())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("key") != digest or "value" not in doc:
        return None
    return doc["value"]


def store(name: str, digest: str, value: Any) -> None:
    """Write the entry atomically; a failure to write is not an error (the result is still right)."""
    import json

    if not enabled():
        return
    target = _path(name, digest)
    try:
        import tempfile  # only a write pays for it (a warm run reads)

        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                # Not sort_keys: a dict's order is part of the result (the registry's entries are in
                # line order, and findings follow it).
                fh.write(json.dumps({"key": digest, "value": value}).encode())
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError:
        pass


def cached(
    name: str, version: str, parts: Iterable[bytes | str], compute: Callable[[], Any]
) -> Any:
    """``compute()``'s JSON-serializable value, from the cache when the same inputs were seen before."""
    import json

    if not enabled():
        return compute()
    digest = key(name, version, parts)
    value = load(name, digest)
    if value is None:
        # What a later run reads back, returned now as well: a cold run and a warm one see the same
        # value (lists, not tuples; the same key order).
        value = json.loads(json.dumps(compute()))
        store(name, digest, value)
    return value

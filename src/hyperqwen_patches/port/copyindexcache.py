"""The old release's copy index (``stalecopy.LineIndex``) kept in the tool's cache between runs.

A rebase that pauses resumes in a new process for every ``--continue``; each one that checks a row
adding functions would read the whole old release again to find what they might copy (~1 s for
vLLM's 2,512 modules). The index depends only on the release's files, so it is kept under
``<cache>/results/copy-index/`` for a release that cannot change under the same name: a ``pypi:``
release, or a ``dir:`` tree of 1,000 files or more keyed by the stat data of every file (the
fingerprint the base commit cache uses; a tree written in the last two seconds is not kept). An entry
that does not read back as an index of exactly the release's module list is rebuilt; a cache that
cannot be written only costs the speed-up; ``HQP_RESULT_CACHE=0`` turns it off.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from pathlib import Path

from hyperqwen_patches import resultcache
from hyperqwen_patches.atomicfile import write_atomic
from hyperqwen_patches.port.stalecopy import LineIndex

VERSION = "1"  # bumped whenever what goes into the index changes


class CachedIndex:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self, paths: Sequence[bytes]) -> LineIndex | None:
        try:
            data = self.path.read_bytes()
        except OSError:
            return None
        return LineIndex.from_bytes(data, paths)

    def save(self, index: LineIndex, paths: Sequence[bytes]) -> None:
        with contextlib.suppress(OSError):  # a cache that cannot be written costs the speed-up only
            write_atomic(self.path, index.to_bytes(paths))


def store_for(label: str, package: str) -> CachedIndex | None:
    """Where the copy index of the release ``label`` is kept, if it can be (see the module doc)."""
    from hyperqwen_patches.sources import basecommit

    if not resultcache.enabled():
        return None
    if label.startswith("pypi:"):
        parts = [label]
    elif label.startswith("dir:"):
        top = Path(label.removeprefix("dir:")).resolve() / package
        fingerprint = basecommit.dir_fingerprint(top)
        fresh = time.time() - fingerprint.newest < basecommit.RACY_SECONDS
        if fingerprint.files < basecommit.DIR_MIN_FILES or fresh:
            return None
        parts = [str(top), fingerprint.digest]
    else:
        return None
    digest = resultcache.key("copy-index", VERSION, parts)
    return CachedIndex(resultcache.root() / "copy-index" / f"{digest}.bin")

"""A fork bundle's branches, fetched once per machine and kept in the cache under the bundle's content.

``check`` compares the series with the fork tip in ``patches/fork.bundle``. Fetching a bundle indexes
its pack and checks its connectivity: ~0.05 s for the shipped 5-commit bundle, 0.4-0.6 s for a
1,000-commit one, on every run. A bundle's bytes name its objects and refs, so the result of fetching
it is keyed by the bundle's sha256 and cannot go stale: an edited bundle is another key.

An entry is a bare repository ``<cache>/bundles/<sha256 of bundle and base>.git`` holding the bundle's own objects (its
prerequisite, the pin's base commit, stays where the caller keeps it) and ``hqp-bundle``, a JSON map of
branch to tip written last: it is built under a temporary name and renamed into place complete, so an
interrupted build leaves nothing a later run trusts. Readers lend its objects to their scratch
repository (alternates) and never write to it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path

from hyperqwen_patches import gitrun
from hyperqwen_patches.cachedir import entry_lock, staging_dir
from hyperqwen_patches.fork import reading as forkgit

SUBDIR = "bundles"
MARKER = "hqp-bundle"


def cached_heads(
    cache_root: Path, bundle: Path, *, base: str, prerequisites: Path
) -> tuple[Path, dict[str, str]] | None:
    """The cache entry for ``bundle`` on ``base`` (built now if missing) and its branches (name ->
    tip SHA).

    ``prerequisites`` is a repository that holds ``base``, the bundle's prerequisite (the caller's
    scratch repository); it is borrowed only while the entry is built. The base is part of the key, so
    a bundle is only ever trusted on the base it was fetched onto. None when the bundle cannot be
    fetched there: the caller's own fetch then reports why, as it always has.
    """
    digest = hashlib.sha256(bundle.read_bytes() + b"\0" + base.encode()).hexdigest()
    root = cache_root / SUBDIR
    entry = root / f"{digest}.git"
    heads = _valid(entry)
    if heads is not None:
        return entry, heads
    with contextlib.ExitStack() as stack:
        try:
            root.mkdir(parents=True, exist_ok=True)
            stack.enter_context(entry_lock(cache_root, entry.name))
        except OSError:
            return None  # a cache that cannot be written only costs the speed-up
        heads = _valid(entry)  # built by the process we waited for
        if heads is not None:
            return entry, heads
        return _build(entry, root, bundle, prerequisites)


def _build(
    entry: Path, root: Path, bundle: Path, prerequisites: Path
) -> tuple[Path, dict[str, str]] | None:
    """Fetch the bundle into a temporary repository and publish it as ``entry`` (lock held)."""
    try:
        tmp = staging_dir(root, entry.name)
    except OSError:
        return None
    try:
        gitrun.init_bare(tmp)
        alternates = tmp / "objects" / "info" / "alternates"
        alternates.write_bytes(bytes(forkgit.common_objects_dir(prerequisites)) + b"\n")
        fetched = gitrun.run(
            [
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                str(bundle.resolve()),
                "+refs/heads/*:refs/heads/*",
            ],
            git_dir=tmp,
        )
        if not fetched.ok:
            return None
        listed = gitrun.check(
            ["for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/"],
            git_dir=tmp,
            what="listing the bundle's branches",
        )
        heads = {}
        for line in listed.decode().splitlines():
            sha, ref = line.split(" ", 1)
            heads[ref.removeprefix("refs/heads/")] = sha
        # The entry keeps only the bundle's own objects; whoever reads it lends the base beside it.
        alternates.unlink()
        (tmp / MARKER).write_text(json.dumps(heads, sort_keys=True) + "\n")
        if entry.exists():  # unusable (no marker, missing objects): nobody trusts it, replace it
            shutil.rmtree(entry, ignore_errors=True)
        try:
            os.rename(tmp, entry)
        except OSError:
            found = _valid(entry)  # another process renamed its build first
            return None if found is None else (entry, found)
        return entry, heads
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _valid(entry: Path) -> dict[str, str] | None:
    try:
        heads = json.loads((entry / MARKER).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(heads, dict) or not all(isinstance(v, str) for v in heads.values()):
        return None
    if heads:
        probe = gitrun.run(
            ["cat-file", "--batch-check"],
            git_dir=entry,
            input="".join(f"{sha}\n" for sha in heads.values()).encode(),
        )
        if not probe.ok or b" missing" in probe.stdout:
            return None
    return heads

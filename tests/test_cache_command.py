"""``cache``: sizes per area; ``--prune`` removes debris and old rebuildable entries, never releases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def hqp(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", "cache", *args],
        env={**os.environ, "HQP_CACHE": str(cache)}, capture_output=True, text=True, check=False,
    )  # fmt: skip


def make(path: Path, data: bytes, *, age_days: float = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    stamp = time.time() - age_days * 86400
    os.utime(path, (stamp, stamp))
    return path


def test_sizes_then_prune(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    old_release = make(cache / "pypi/vllm-0.29.0-wheel/v.whl", b"w" * 1000, age_days=400)
    old_result = make(cache / "results/manifest/a.json", b"r" * 10, age_days=60)
    new_result = make(cache / "results/manifest/b.json", b"r" * 20)
    old_base = cache / "base/pypi_vllm==0.28.0.git"
    make(old_base / "HEAD", b"ref", age_days=90)
    os.utime(old_base, (time.time() - 90 * 86400,) * 2)
    debris = cache / "base/.pypi_vllm==0.29.0.git.staging-1-ab"
    make(debris / "objects/x", b"half")

    doc = json.loads(hqp(cache, "--json").stdout)
    sizes = {a["area"]: (a["files"], a["bytes"]) for a in doc["areas"]}
    assert sizes["pypi"] == (1, 1000) and sizes["results"] == (2, 30)

    listed = hqp(cache, "--prune", "--dry-run", "--json")
    assert listed.returncode == 0, listed.stderr
    doomed = set(json.loads(listed.stdout)["removed"])
    assert doomed == {str(old_result), str(old_base), str(debris)}
    assert old_result.exists() and debris.exists()  # a dry run removes nothing

    done = hqp(cache, "--prune")
    assert done.returncode == 0 and "cache --prune: 3 entries" in done.stdout
    assert not old_result.exists() and not old_base.exists() and not debris.exists()
    assert old_release.exists() and new_result.exists()


def test_prune_leaves_what_a_running_build_holds(tmp_path: Path) -> None:
    """A staging directory whose entry's lock a build holds is its work, not debris: kept until the
    lock is free. An old entry in use by its builder likewise."""
    import fcntl

    cache = tmp_path / "cache"
    staging = cache / "base/.pypi_vllm==0.29.0.git.staging-7-cd"
    make(staging / "objects/x", b"being written")
    old = cache / "bundles/b1"
    make(old / "x", b"old", age_days=90)
    os.utime(old, (time.time() - 90 * 86400,) * 2)
    (cache / "locks").mkdir(parents=True)
    with (
        open(cache / "locks/pypi_vllm==0.29.0.git.lock", "a+b") as a,
        open(cache / "locks/b1.lock", "a+b") as b,
    ):
        fcntl.flock(a, fcntl.LOCK_EX)  # as basecommit.cached_base holds it while it builds
        fcntl.flock(b, fcntl.LOCK_EX)
        held = json.loads(hqp(cache, "--prune", "--days", "0", "--json").stdout)
        assert held["removed"] == [] and staging.exists() and old.exists()
    freed = json.loads(hqp(cache, "--prune", "--days", "0", "--json").stdout)
    assert sorted(freed["removed"]) == sorted([str(old), str(staging)])
    assert not staging.exists() and not old.exists()


def test_prune_never_follows_an_area_that_is_a_link(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    outside = tmp_path / "elsewhere"
    victim = make(outside / "old-entry/file", b"not the cache's", age_days=90)
    os.utime(outside / "old-entry", (time.time() - 90 * 86400,) * 2)
    cache.mkdir()
    (cache / "base").symlink_to(outside)
    done = hqp(cache, "--prune", "--days", "0", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["removed"] == []
    assert victim.read_bytes() == b"not the cache's"


def test_prune_leaves_a_base_commit_a_warm_check_is_borrowing(tmp_path: Path) -> None:
    """A warm ``check`` takes the base entry without building it; it used to hold no lock, so a
    prune meanwhile deleted what it borrowed (1 of 3 warm checks broke). It now holds the entry's
    lock shared for as long as it borrows it: prune skips the entry, and removes it afterwards."""
    import contextlib

    from fixtures_git import PRISTINE, DictTree

    from hyperqwen_patches.sources import basecommit

    cache = tmp_path / "cache"
    label = "pypi:vllm==0.29.0"
    built = basecommit.cached_base(
        cache, label, DictTree(PRISTINE), package="vllm", version="0.29.0"
    )
    assert built is not None
    entry = built[0]
    os.utime(entry, (time.time() - 90 * 86400,) * 2)  # old enough for any --days
    for cold in (False, True):
        if cold:  # the cold path too: built, then held from the moment it is published
            assert json.loads(hqp(cache, "--prune", "--days", "0", "--json").stdout)["removed"]
            assert not entry.exists()
        with contextlib.ExitStack() as hold:
            got = basecommit.cached_base(
                cache, label, DictTree(PRISTINE), package="vllm", version="0.29.0", hold=hold
            )
            assert got == built
            os.utime(entry, (time.time() - 90 * 86400,) * 2)
            pruned = json.loads(hqp(cache, "--prune", "--days", "0", "--json").stdout)
            assert pruned["removed"] == [] and (entry / basecommit.BASE_MARKER).is_file()
        after = json.loads(hqp(cache, "--prune", "--days", "0", "--dry-run", "--json").stdout)
        assert after["removed"] == [str(entry)]


def test_a_base_entry_from_before_listings_were_checked_is_built_again(tmp_path: Path) -> None:
    """A base commit built from a member table that had lost a row lacks that file for good; entries
    written before the listing was checked against RECORD carry no format line and are rebuilt."""
    from fixtures_git import PRISTINE, DictTree

    from hyperqwen_patches.sources import basecommit

    cache = tmp_path / "cache"
    label = "pypi:vllm==0.29.0"
    entry, commit = basecommit.cached_base(
        cache, label, DictTree(PRISTINE), package="vllm", version="0.29.0"
    ) or (None, None)
    assert entry is not None
    marker = entry / basecommit.BASE_MARKER
    assert marker.read_text() == f"{commit}\n{basecommit.BASE_FORMAT}\n"
    marker.write_text(f"{commit}\n")  # as an older version wrote it
    again = basecommit.cached_base(
        cache, label, DictTree(PRISTINE), package="vllm", version="0.29.0"
    )
    assert again == (entry, commit) and marker.read_text().endswith(f"{basecommit.BASE_FORMAT}\n")

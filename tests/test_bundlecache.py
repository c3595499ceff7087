"""The bundle cache (bundlecache.py): a fork bundle fetched once, keyed by its bytes and the base.

Real git throughout: a small repository, a real ``git bundle`` with the base as its prerequisite, and a
bare repository holding only the base, as ``check``'s scratch repository does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from hyperqwen_patches.fork import bundlecache
from hyperqwen_patches.fork import reading as forkgit


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def make_bundle(tmp: Path, commits: int = 2) -> tuple[Path, str, str, Path]:
    """(work repo, base sha, tip sha of branch topic, bundle base..topic)."""
    work = tmp / "work"
    (work / "vllm").mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=work)
    (work / "vllm/a.py").write_text("A = 0\n")
    git("add", "-A", cwd=work)
    git("commit", "-qm", "base", cwd=work)
    base = git("rev-parse", "HEAD", cwd=work)
    git("checkout", "-qb", "topic", cwd=work)
    for i in range(commits):
        (work / "vllm/a.py").write_text(f"A = {i + 1}\n")
        git("commit", "-qam", f"row {i}", cwd=work)
    tip = git("rev-parse", "HEAD", cwd=work)
    bundle = tmp / f"fork-{commits}.bundle"
    git("bundle", "create", "-q", str(bundle), f"{base}..topic", cwd=work)
    return work, base, tip, bundle


def base_only(tmp: Path, work: Path, base: str) -> Path:
    repo = tmp / "prereq.git"
    git("init", "-q", "--bare", str(repo), cwd=tmp)
    git("push", "-q", str(repo), f"{base}:refs/heads/base", cwd=work)
    return repo


def test_cold_then_warm(tmp_path: Path) -> None:
    work, base, tip, bundle = make_bundle(tmp_path)
    prereq = base_only(tmp_path, work, base)
    cache = tmp_path / "cache"
    entry, heads = bundlecache.cached_heads(cache, bundle, base=base, prerequisites=prereq)  # type: ignore[misc]
    assert heads == {"topic": tip}
    # Only the bundle's own objects: no alternates left behind, no temporary directory.
    assert not (entry / "objects/info/alternates").exists()
    assert [p.name for p in (cache / "bundles").iterdir()] == [entry.name]
    # A scratch repository lending the base and the entry reads the whole branch.
    with forkgit.scratch_repo(also=[prereq]) as scratch:
        forkgit.lend(scratch, entry / "objects")
        log = subprocess.run(
            ["git", "--git-dir", str(scratch), "log", "--format=%s", f"{base}..{tip}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        assert log == ["row", "1", "row", "0"]
    # Warm: no fetch (an empty prerequisite repository would make one fail).
    empty = tmp_path / "empty.git"
    git("init", "-q", "--bare", str(empty), cwd=tmp_path)
    assert bundlecache.cached_heads(cache, bundle, base=base, prerequisites=empty) == (entry, heads)


def test_other_bytes_or_another_base_are_other_entries(tmp_path: Path) -> None:
    work, base, _, bundle = make_bundle(tmp_path)
    prereq = base_only(tmp_path, work, base)
    cache = tmp_path / "cache"
    first = bundlecache.cached_heads(cache, bundle, base=base, prerequisites=prereq)
    assert first is not None
    # The same branch one commit further: another bundle, another entry, the new tip.
    (work / "vllm/a.py").write_text("A = 9\n")
    git("commit", "-qam", "row 2", cwd=work)
    newer = tmp_path / "newer.bundle"
    git("bundle", "create", "-q", str(newer), f"{base}..topic", cwd=work)
    second = bundlecache.cached_heads(cache, newer, base=base, prerequisites=prereq)
    assert second is not None and second[0] != first[0]
    assert second[1] == {"topic": git("rev-parse", "HEAD", cwd=work)}
    # On a base the scratch repository does not hold (the pristine tree changed), the fetch fails:
    # None, nothing cached, and the caller's own fetch reports why.
    empty = tmp_path / "empty.git"
    git("init", "-q", "--bare", str(empty), cwd=tmp_path)
    assert bundlecache.cached_heads(cache, bundle, base="1" * 40, prerequisites=empty) is None
    assert len(list((cache / "bundles").iterdir())) == 2


def test_a_damaged_entry_is_rebuilt_not_trusted(tmp_path: Path) -> None:
    work, base, tip, bundle = make_bundle(tmp_path)
    prereq = base_only(tmp_path, work, base)
    cache = tmp_path / "cache"
    entry, _ = bundlecache.cached_heads(cache, bundle, base=base, prerequisites=prereq)  # type: ignore[misc]
    # Objects gone (a cleanup, a full disk): rebuilt, not trusted.
    shutil.rmtree(entry / "objects")
    (entry / "objects").mkdir()
    assert bundlecache.cached_heads(cache, bundle, base=base, prerequisites=prereq) is not None
    assert (
        subprocess.run(
            ["git", "--git-dir", str(entry), "cat-file", "-e", tip], check=False
        ).returncode
        == 0
    )
    # A marker that is not the JSON map this module writes: rebuilt as well.
    (entry / bundlecache.MARKER).write_text("not json")
    again = bundlecache.cached_heads(cache, bundle, base=base, prerequisites=prereq)
    assert again is not None and again[1] == {"topic": tip}
    assert json.loads((entry / bundlecache.MARKER).read_text()) == {"topic": tip}

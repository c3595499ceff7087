"""8 cold ``check`` runs at once on one cache, as real processes: every one passes.

The incident: 4-6 of 8 concurrent cold runs failed. The wheel download was locked, the base commit
and the bundle entries were not: a run that had built its own copy found another's just published,
judged it unusable and removed it while others read it. Entries are now built under a lock
(``cachedir.entry_lock``) and whoever waited re-checks the entry before building.

The wheel itself is hard-linked from the machine's cache (the download is locked and tested
elsewhere; 316 MB eight times would measure the network): the base commit, the bundle entry and the
result cache start empty.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, TEST_CACHE

PIN = "0.29.0"
RUNS = 8


def test_eight_cold_checks_at_once_all_pass(tmp_path: Path) -> None:
    wheel_entry = TEST_CACHE / "pypi" / f"vllm-{PIN}-wheel"
    if not any(wheel_entry.glob("*.whl")):
        # The shipped-series tests fetch it first in the same run (test_check, test_replay_shipped).
        subprocess.run(
            [sys.executable, "-m", "hyperqwen_patches", "check", "--repo", str(REPO_ROOT)],
            capture_output=True,
            check=False,
        )
    if not any(wheel_entry.glob("*.whl")):
        pytest.skip(f"no cached vllm {PIN} wheel (no registry reachable)")
    cache = tmp_path / "cache"
    (cache / "pypi").mkdir(parents=True)
    shutil.copytree(wheel_entry, cache / "pypi" / wheel_entry.name, copy_function=os.link)
    env = {**os.environ, "HQP_CACHE": str(cache)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "hyperqwen_patches", "check", "--repo", str(REPO_ROOT)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for _ in range(RUNS)
    ]
    results = [(p.wait(timeout=600), p.communicate()) for p in procs]
    failed = [err.decode()[-600:] for rc, (_, err) in results if rc != 0]
    assert not failed, f"{len(failed)} of {RUNS} failed:\n" + "\n---\n".join(failed)
    assert len(list((cache / "base").glob("*.git"))) == 1
    assert not list((cache / "base").glob(".*"))  # no build debris left behind


WORKER = r"""
import contextlib, subprocess, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from fixtures_git import PRISTINE, DictTree
from hyperqwen_patches.sources import basecommit

cache = Path(sys.argv[1])
for _ in range(int(sys.argv[3])):
    with contextlib.ExitStack() as hold:
        entry, commit = basecommit.cached_base(
            cache, "pypi:vllm==0.29.0", DictTree(PRISTINE), package="vllm", version="0.29.0",
            hold=hold,
        )
        for _ in range(3):  # what a check does with the entry while it borrows it
            time.sleep(0.02)
            probe = subprocess.run(
                ["git", "--git-dir", str(entry), "cat-file", "-e", commit + "^{tree}"],
                capture_output=True,
            )
            if probe.returncode != 0 or not (entry / basecommit.BASE_MARKER).is_file():
                sys.exit(f"the base entry went away while borrowed: {probe.stderr!r}")
"""


def test_prune_in_a_loop_never_breaks_the_checks_borrowing_the_base(tmp_path: Path) -> None:
    """The issue's race: ``cache --prune`` broke 1 of 3 warm checks (and 7 of 7 cold ones) by
    deleting the base entry they borrowed. Four borrowers (each building the entry when a prune
    took it) and a prune loop, as real processes, bounded rounds: no borrower sees it go."""
    cache = tmp_path / "cache"
    env = {**os.environ, "HQP_CACHE": str(cache)}
    tests = str(Path(__file__).resolve().parent)
    borrowers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(cache), tests, "12"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for _ in range(4)
    ]
    while any(p.poll() is None for p in borrowers):
        done = subprocess.run(
            [sys.executable, "-m", "hyperqwen_patches", "cache", "--prune", "--days", "0"],
            capture_output=True, text=True, env=env, check=False, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    results = [(p.wait(timeout=300), p.communicate()) for p in borrowers]
    failed = [err.decode()[-600:] for rc, (_, err) in results if rc != 0]
    assert not failed, f"{len(failed)} of 4 borrowers failed:\n" + "\n---\n".join(failed)

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

"""The shipped series against its shipped fork: patches/fork.bundle replays the series exactly.

This is what `./hqp check` verifies offline in CI; a row edited without refreshing the fork fails here
(docs/fork.md, "Refreshing the fork after editing a row's file", says what to run).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperqwen_patches.checks.pipeline import run_check
from hyperqwen_patches.fork.checks import (
    check_export,
    check_fork_commits,
    check_replay_identity,
    check_unfilled_rows,
)
from hyperqwen_patches.series.manifest import load_manifest

REPO = Path(__file__).resolve().parent.parent
FORK_CHECKS = (
    check_replay_identity,
    check_export,
    check_fork_commits,
    check_unfilled_rows,
)


def test_the_bundle_is_shipped_with_the_base_as_its_only_prerequisite() -> None:
    bundle = REPO / "patches" / "fork.bundle"
    header = bundle.read_bytes().split(b"\n\n", 1)[0].decode().splitlines()
    assert header[0] == "# v2 git bundle"
    manifest = load_manifest(REPO)
    point = manifest.export_points[0]
    assert [line for line in header if line.startswith("-")] == [
        f"-{point.base} {manifest.package} {manifest.pin} pristine tree"
    ]
    assert f"{point.commit} refs/heads/{point.branch}" in header
    # The base is the documented one for this pin.
    assert point.base in (REPO / "docs" / "fork.md").read_text()


@pytest.mark.network
def test_shipped_series_replays_on_its_bundle() -> None:
    report = run_check(REPO, pipeline=FORK_CHECKS)
    assert report.findings == (), "\n".join(
        f"{f.check} {f.subject}: {f.message}" for f in report.findings
    )

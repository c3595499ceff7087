"""run_check's worker thread: the report is the sequential run's, in pipeline order; the context's shared
properties are computed once however many threads ask; what a background check raises still counts."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from test_check import MINE, make_repo

from hyperqwen_patches.checklist import BACKGROUND, PIPELINE
from hyperqwen_patches.checks.context import CheckContext, Finding, _once
from hyperqwen_patches.checks.pipeline import run_check
from hyperqwen_patches.errors import UsageError

REPO = Path(__file__).resolve().parent.parent
ORDER: list[str] = []
FOREGROUND_RAN = threading.Event()


def slow_background(ctx: CheckContext) -> list[Finding]:
    """Finishes after the calling thread's checks: its findings must still come first."""
    FOREGROUND_RAN.wait(timeout=30)
    ORDER.append("background")
    return [Finding("slow-background", "error", "bg", f"{len(ctx.series)} rows (shared series)")]


def failing_background(ctx: CheckContext) -> list[Finding]:
    raise UsageError("the fork cannot be read", hint="pass --fork")


def crashing_background(ctx: CheckContext) -> list[Finding]:
    raise RuntimeError("a bug in a background check")


def foreground(ctx: CheckContext) -> list[Finding]:
    ORDER.append("foreground")
    FOREGROUND_RAN.set()
    return [Finding("foreground", "warning", "fg", "ran on the calling thread")]


def test_findings_keep_pipeline_order_whichever_thread_finishes_first(tmp_path: Path) -> None:
    root, _ = make_repo(tmp_path)
    ORDER.clear()
    FOREGROUND_RAN.clear()
    pipeline = (slow_background, *MINE, foreground)
    report = run_check(root, pipeline=pipeline, background={slow_background})
    assert ORDER == ["foreground", "background"]  # it did run concurrently, and finished last
    assert [f.check for f in report.findings] == ["slow-background", "foreground"]
    assert report.findings[0].message == "2 rows (shared series)"
    assert run_check(root, pipeline=pipeline) == report  # the sequential run's report


def test_a_typed_error_on_the_worker_is_a_problem_finding_in_its_place(tmp_path: Path) -> None:
    root, _ = make_repo(tmp_path)
    report = run_check(
        root,
        pipeline=(*MINE, failing_background, foreground),
        background={failing_background},
    )
    assert [(f.check, f.severity) for f in report.findings] == [
        ("failing-background", "problem"),
        ("foreground", "warning"),
    ]
    assert report.findings[0].detail == "hint: pass --fork"


def test_a_bug_on_the_worker_is_raised_not_swallowed(tmp_path: Path) -> None:
    root, _ = make_repo(tmp_path)
    with pytest.raises(RuntimeError, match="a bug in a background check"):
        run_check(root, pipeline=(*MINE, crashing_background), background={crashing_background})


class Counted:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.calls = 0

    @_once
    def value(self) -> list[int]:
        self.calls += 1
        time.sleep(0.05)  # long enough for every thread to arrive while it is being computed
        return [self.calls]

    @_once
    def derived(self) -> int:
        return len(self.value)  # re-entrant: one property computed inside another


def test_a_shared_property_is_computed_once_across_threads() -> None:
    obj = Counted()
    seen: list[list[int]] = []
    threads = [threading.Thread(target=lambda: seen.append(obj.value)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert obj.calls == 1
    assert all(v is seen[0] for v in seen) and len(seen) == 8
    assert obj.derived == 1
    assert "value" in vars(obj)  # where CheckContext.peek looks


@pytest.mark.network
def test_the_shipped_check_threaded_equals_sequential() -> None:
    """The whole pipeline on the repository (replay against patches/fork.bundle included)."""
    assert BACKGROUND and set(PIPELINE) >= BACKGROUND
    threaded = run_check(REPO, pipeline=PIPELINE, background=BACKGROUND)
    sequential = run_check(REPO, pipeline=PIPELINE)
    assert threaded == sequential
    assert threaded.to_json() == sequential.to_json()

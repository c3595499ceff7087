"""``port --rebase`` through the command: rows whose change only touches an upstream change go through,
reported for review, where ``git cherry-pick`` of the same fork commit onto the same base pauses.

The incident (issue #37): on a real 50-row port, six rows that kept every +/- line paused because
diff3 calls touching changes a conflict; a person wrote by hand what a machine could have.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema

from tests.test_json_schemas import schema as load_schema
from tests.test_port import forked_series, make_patch, release

RUNNER = """\
import torch


def helper(n):
    return n + 1


def _dummy_run(self, num_tokens: int) -> None:
    return self.model(num_tokens)


def profile(self):
    # Profile the model with dummy inputs to find the peak memory usage
    self.profile_run()
    return self.peak_memory
"""
NEW_FUNCTION = "def warm_up(self, sizes):\n    for n in sizes:\n        helper(n)\n\n\n"
# Upstream renamed the function the row adds one above, and gave profile_run an argument.
RUNNER_NEW = RUNNER.replace("def _dummy_run(", "def _dummy_forward(").replace(
    "self.profile_run()", "self.profile_run(randomize_inputs=self.randomize)"
)
ROW_ABOVE = RUNNER.replace("def _dummy_run(", NEW_FUNCTION + "def _dummy_run(")
APPENDED = "    if envs.VLLM_PROFILE_AFTER_WARMUP:\n        self.profile_run()\n"
ROW_AFTER = ROW_ABOVE.replace("    return self.peak", APPENDED + "    return self.peak")

LOOP = "def step(self, batch):\n    outputs = self.model(batch)\n    return outputs\n"
LOOP_NEW = LOOP.replace("    outputs", "    if batch.is_empty():\n        return None\n    outputs")
LOGGED = '    logger.info("kvarn step")\n'
ROW_LOOP = LOOP.replace("    outputs", LOGGED + "    outputs")
# The same row also changes a line upstream changed too: a real conflict, the rebase pauses.
KNOB = 'LIMIT = int(os.getenv("VLLM_LIMIT", "8"))\n'
KNOB_NEW = 'LIMIT = int(os.getenv("VLLM_LIMIT", "16"))\n'
KNOB_ROW = 'LIMIT = int(os.getenv("VLLM_LIMIT", "32"))\n'


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=check)


def hqp(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", "port", *args, "--repo", str(repo)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_rows_that_only_touch_upstream_changes_go_through_where_cherry_pick_pauses(
    tmp_path: Path,
) -> None:
    old = release(
        tmp_path, "old", {"vllm/runner.py": RUNNER, "vllm/loop.py": LOOP, "vllm/knobs.py": KNOB}
    )
    new = release(
        tmp_path,
        "new",
        {"vllm/runner.py": RUNNER_NEW, "vllm/loop.py": LOOP_NEW, "vllm/knobs.py": KNOB_NEW},
    )
    w = tmp_path / "w"
    rows = [
        ("warm-up", make_patch("vllm/runner.py", RUNNER, ROW_ABOVE, w)),
        ("after-warmup", make_patch("vllm/runner.py", ROW_ABOVE, ROW_AFTER, w)),
        (
            "step-log",
            make_patch("vllm/loop.py", LOOP, ROW_LOOP, w)
            + make_patch("vllm/knobs.py", KNOB, KNOB_ROW, w),
        ),
    ]
    repo, fork = forked_series(tmp_path, rows, old)
    schema = jsonschema.Draft202012Validator(load_schema("port"))

    src = ["--from-source", f"dir:{old}", "--source", f"dir:{new}"]
    paused = hqp(repo, "--to", "0.30.0", *src, "--rebase", "--fork", str(fork), "--json")
    assert paused.returncode == 1, paused.stderr
    doc = json.loads(paused.stdout)
    schema.validate(doc)
    rebase = doc["reports"][0]["rebase"]
    assert [(c["row"], c["how"]) for c in rebase["commits"]] == [
        ("warm-up", "merged"),
        ("after-warmup", "merged"),
    ]
    assert [(a["row"], a["file"], a["line"]) for a in rebase["adjacent"]] == [
        ("warm-up", "vllm/runner.py", 8),
        ("after-warmup", "vllm/runner.py", 19),
    ]
    assert all(a["note"] == "merged next to an upstream change: review" for a in rebase["adjacent"])
    # The paused row: its loop.py merged next to upstream's new block, knobs.py a real conflict.
    files = {f["path"]: f for f in rebase["paused"]["files"]}
    assert files["vllm/loop.py"]["how"] == "adjacent"
    assert files["vllm/loop.py"]["adjacent"][0]["line"] == 2
    assert files["vllm/knobs.py"]["how"] == "conflict"
    assert files["vllm/knobs.py"]["why"] == [
        "both sides change the same base line (line 1 before the row)"
    ]
    worktree = Path(rebase["paused"]["worktree"])
    assert (worktree / "vllm/loop.py").read_text() == LOOP_NEW.replace(
        "    outputs", LOGGED + "    outputs"
    )

    # git cherry-pick of the same fork commits onto the same base pauses on both merged rows.
    old_commits = git(fork, "rev-list", "--reverse", "qwen/0.29").stdout.split()[-3:]
    picks = tmp_path / "picks"
    git(fork, "worktree", "add", "--detach", str(picks), rebase["base"])
    for commit in old_commits[:2]:
        picked = git(picks, "cherry-pick", commit, check=False)
        assert picked.returncode != 0 and "CONFLICT" in picked.stdout + picked.stderr
        git(picks, "cherry-pick", "--abort")

    (worktree / "vllm/knobs.py").write_text(KNOB_ROW.replace("32", "64"))
    done = hqp(repo, "--rebase", "--continue", "--fork", str(fork), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    schema.validate(doc)
    rebase = doc["reports"][0]["rebase"]
    assert [a["row"] for a in rebase["adjacent"]] == ["warm-up", "after-warmup"]
    branch = rebase["branch"]
    runner = git(fork, "show", f"{branch}:vllm/runner.py").stdout
    assert runner == RUNNER_NEW.replace(
        "def _dummy_forward(", NEW_FUNCTION + "def _dummy_forward("
    ).replace("    return self.peak", APPENDED + "    return self.peak")
    assert git(fork, "show", f"{branch}:vllm/loop.py").stdout == LOOP_NEW.replace(
        "    outputs", LOGGED + "    outputs"
    )
    message = git(fork, "log", "-1", "--format=%B", f"{branch}~2").stdout
    assert "Merged next to an upstream change (review): vllm/runner.py:8." in message

    md = tmp_path / "port.md"
    table = hqp(
        repo, "--to", "0.30.0", *src, "--rebase", "--fork", str(fork), "--branch", "t",
        "--markdown", str(md),
    )  # fmt: skip
    assert table.returncode == 1, table.stderr
    assert "Traceback" not in table.stderr  # --markdown with --rebase once crashed here
    assert (
        "- warm-up: `vllm/runner.py:8` merged next to an upstream change (the row inserts next to "
        "lines upstream changed): review" in md.read_text()
    )
    assert "warm-up: vllm/runner.py:8: merged next to an upstream change: review" in table.stdout
    assert "vllm/loop.py: merged next to an upstream change at line 2: review" in table.stdout
    assert (
        "vllm/knobs.py: 1 conflict(s), markers left: both sides change the same base line (line 1 "
        "before the row)" in table.stdout
    )

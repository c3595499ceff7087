"""Replay identity (invariant 4), export up to date (5) and fork membership (7) inside ``check``.

Each identity failure named in issue 4 is built on a real fork and must be named correctly: a fork
commit edited after export, a hunk moved between two rows, a missing row, an extra fork commit; plus a
rebase that keeps content (positional drift only) and the forms of --fork (path, file:// URL, bundle).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from fixtures_git import (
    BRANCH,
    FORK_COMMITS,
    PRISTINE,
    FixtureCommit,
    apply_commit,
    make_fork,
    sh,
    write_tree_files,
)
from test_import_roundtrip import export, new_series

from hyperqwen_patches.checks.context import Finding
from hyperqwen_patches.checks.pipeline import run_check
from hyperqwen_patches.fork import exporting
from hyperqwen_patches.fork.checks import (
    check_export,
    check_fork_commits,
    check_replay_identity,
    check_unfilled_rows,
)
from hyperqwen_patches.series.manifest import load_manifest

FORK_CHECKS = (
    check_replay_identity,
    check_export,
    check_fork_commits,
    check_unfilled_rows,
)


def pristine_dir(tmp_path: Path, files: dict[bytes, bytes] = PRISTINE) -> str:
    root = tmp_path / "pristine"
    write_tree_files(root, files)
    return f"dir:{root}"


def fill_rows(series: Path) -> None:
    """What the maintainer does after export added rows: describe them."""
    path = series / "patches" / "manifest.yaml"
    text = re.sub(
        r'what: "TODO: describe \(added by export from (.*)\)"', r'what: "\1"', path.read_text()
    )
    path.write_text(text.replace('retires_when: "TODO"', "retires_when: never"))
    from hyperqwen_patches.series.render import write

    write(load_manifest(series))


def setup(tmp_path: Path) -> tuple[Path, Path, str, list[str]]:
    fork = tmp_path / "fork"
    base, shas = make_fork(fork)
    series = new_series(tmp_path / "series")
    export(series, fork)
    fill_rows(series)
    return fork, series, base, shas


def findings(series: Path, tmp_path: Path, fork: str | None, **kw: object) -> list[Finding]:
    report = run_check(
        series,
        source=pristine_dir(tmp_path),
        fork=fork,
        pipeline=FORK_CHECKS,
        **kw,  # type: ignore[arg-type]
    )
    return list(report.findings)


def errors(found: list[Finding]) -> list[tuple[str, str, str]]:
    return [(f.check, f.subject, f.message) for f in found if f.severity == "error"]


def test_clean_fork_holds_every_invariant(tmp_path: Path) -> None:
    fork, series, _base, _ = setup(tmp_path)
    assert findings(series, tmp_path, str(fork)) == []


def test_unfilled_rows_are_flagged_until_described(tmp_path: Path) -> None:
    fork = tmp_path / "fork"
    make_fork(fork)
    series = new_series(tmp_path / "series")
    export(series, fork)
    found = errors(findings(series, tmp_path, str(fork)))
    assert [s for c, s, _ in found if c == "unfilled-rows"] == [c.row for c in FORK_COMMITS]


def test_fork_commit_edited_after_export(tmp_path: Path) -> None:
    fork, series, _base, shas = setup(tmp_path)
    # Amend the second commit (crlf-latin1) in the fork and replay the rest on top.
    sh(["checkout", "-q", shas[1]], cwd=fork)
    (fork / "vllm" / "nonl.py").write_bytes(b"x = 1\ny = 21\nz = 3")
    sh(["commit", "-q", "-a", "--amend", "--no-edit"], cwd=fork)
    sh(["cherry-pick", "--allow-empty", f"{shas[1]}..{BRANCH}"], cwd=fork)
    sh(["branch", "-f", BRANCH, "HEAD"], cwd=fork)
    found = errors(findings(series, tmp_path, str(fork)))
    identity = [(s, m) for c, s, m in found if c == "replay-identity"]
    assert identity[0][0] == "crlf-latin1"
    assert identity[0][1].startswith("first divergent step: pristine + rows up to crlf-latin1")
    assert "vllm/nonl.py" in identity[0][1]
    # Later steps and the tip carry the same edit: one finding says it (issue #39: the same diff
    # was printed for every step and the tip), with the command that fixes it.
    assert len(identity) == 1
    assert (
        "export",
        "crlf-latin1",
        "patches/crlf-latin1.patch: semantic drift: export would change its content",
    ) in found
    detail = next(
        f.detail for f in findings(series, tmp_path, str(fork)) if f.check == "replay-identity"
    )
    assert "-y = 20" in detail and "+y = 21" in detail
    assert "fix: run `hyperqwen-patches export`" in detail and "edit crlf-latin1" in detail


def test_hunk_moved_between_two_rows(tmp_path: Path) -> None:
    """The nonl.py hunk moves from crlf-latin1 to envs-knob: step 1 differs, step 2 and the tip agree."""
    fork, series, _base, _ = setup(tmp_path)
    nonl = {b"vllm/nonl.py": FORK_COMMITS[1].changes[b"vllm/nonl.py"]}
    rest = {k: v for k, v in FORK_COMMITS[1].changes.items() if k != b"vllm/nonl.py"}
    moved = (
        FixtureCommit("envs-knob", FORK_COMMITS[0].subject, {**FORK_COMMITS[0].changes, **nonl}),
        FixtureCommit("crlf-latin1", FORK_COMMITS[1].subject, rest),
        *FORK_COMMITS[2:],
    )
    fork2 = tmp_path / "fork2"
    make_fork(fork2, moved)
    export(series, fork2)  # the series now has the hunk in envs-knob...
    fill_rows(series)
    # ...and is checked against the original fork, where it belongs to crlf-latin1.
    found = errors(findings(series, tmp_path, str(fork)))
    identity = [(s, m) for c, s, m in found if c == "replay-identity"]
    assert [s for s, _ in identity] == ["envs-knob"]
    assert identity[0][1].endswith("in 1 file(s): vllm/nonl.py")
    drifted = sorted(s for c, s, _ in found if c == "export")
    assert drifted == ["crlf-latin1", "envs-knob"]


def test_missing_row(tmp_path: Path) -> None:
    fork, series, _base, _ = setup(tmp_path)
    path = series / "patches" / "manifest.yaml"
    text = path.read_text()
    start = text.index("  - name: mode-rename")
    end = text.index("  - name: new-module")
    path.write_text(text[:start] + text[end:])
    os.remove(series / "patches" / "mode-rename.patch")
    found = errors(findings(series, tmp_path, str(fork)))
    missing = [m for c, s, m in found if c == "fork-commits" and s == "mode-rename"]
    assert len(missing) == 1 and missing[0].startswith("missing row: fork commit")
    assert "names row mode-rename, which the manifest does not have" in missing[0]
    identity = [s for c, s, _ in found if c == "replay-identity"]
    assert identity[0] == "new-module"  # the first step after the hole differs


def test_extra_fork_commit(tmp_path: Path) -> None:
    fork, series, _base, _ = setup(tmp_path)
    sha = apply_commit(fork, 9, FixtureCommit("unused", "Quick fix", {b"vllm/nonl.py": b"x = 1\n"}))
    # apply_commit always writes a trailer; an extra commit has none: reword it.
    sh(["commit", "-q", "--amend", "-m", "Quick fix"], cwd=fork)
    sha = sh(["rev-parse", "HEAD"], cwd=fork).decode().strip()
    found = errors(findings(series, tmp_path, str(fork)))
    extra = [m for c, s, m in found if c == "fork-commits" and s == sha[:12]]
    assert extra == [
        f"extra fork commit {sha[:12]} 'Quick fix': no Hqp-Row trailer and no row records it"
    ]
    tip = [m for c, s, m in found if c == "replay-identity"]
    assert tip and tip[0].startswith("tip: pristine + series differs") and "vllm/nonl.py" in tip[0]


def test_vanished_commit_and_stale_recorded_sha(tmp_path: Path) -> None:
    fork, series, _base, shas = setup(tmp_path)
    sh(["reset", "-q", "--hard", shas[2]], cwd=fork)  # new-module's commit leaves the export point
    found = errors(findings(series, tmp_path, str(fork)))
    assert (
        "fork-commits",
        "new-module",
        "row new-module has no commit on export point qwen38 (its commit vanished)",
    ) in found


def test_rebase_keeping_content_is_positional_drift_only(tmp_path: Path) -> None:
    fork, series, _base, shas = setup(tmp_path)
    # A changed base of the same pin: lines inserted above every hunk.
    changed = dict(PRISTINE)
    changed[b"vllm/envs.py"] = b"import os\n\n" + PRISTINE[b"vllm/envs.py"]
    changed[b"vllm/worker/gpu_worker.py"] = (
        b"# header\n" * 5 + PRISTINE[b"vllm/worker/gpu_worker.py"]
    )
    from fixtures_git import base_into

    new_base = base_into(fork, changed)
    sh(["rebase", "-q", "--onto", new_base, shas[0] + "~1", BRANCH], cwd=fork)
    plan = exporting.plan_export(load_manifest(series), fork)
    assert not plan.semantic and not plan.added_rows
    assert sorted(c.path for c in plan.positional) == [
        "patches/envs-knob.patch",
        "patches/mode-rename.patch",
    ]
    assert set(plan.commit_updates) == {c.row for c in FORK_COMMITS}

    from typer.testing import CliRunner

    from hyperqwen_patches.cli import app

    before = {p: p.read_bytes() for p in (series / "patches").iterdir()}
    result = CliRunner().invoke(
        app, ["export", "--fork", str(fork), "--repo", str(series), "--check"]
    )
    assert result.exit_code == 0, result.output
    assert "positional drift only (2 patch file(s)" in result.output
    assert "positional patches/envs-knob.patch (envs-knob)" in result.output
    assert {p: p.read_bytes() for p in (series / "patches").iterdir()} == before  # wrote nothing

    # A semantic change fails --check.
    (fork / "vllm" / "envs.py").write_bytes((fork / "vllm" / "envs.py").read_bytes() + b"X = 1\n")
    sh(["commit", "-q", "-a", "--amend", "--no-edit"], cwd=fork)
    result = CliRunner().invoke(
        app, ["export", "--fork", str(fork), "--repo", str(series), "--check"]
    )
    assert result.exit_code == 1
    assert "SEMANTIC" in result.output and "patches/new-module.patch" in result.output


@pytest.mark.parametrize("form", ["bundle-default", "bundle-path", "url"])
def test_fork_forms(tmp_path: Path, form: str) -> None:
    fork, series, base, _ = setup(tmp_path)
    bundle = series / "patches" / "fork.bundle"
    sh(["bundle", "create", "-q", str(bundle), f"{base}..{BRANCH}"], cwd=fork)
    listed = sh(["bundle", "list-heads", str(bundle)], cwd=fork)
    assert f"refs/heads/{BRANCH}".encode() in listed
    given = {"bundle-default": None, "bundle-path": str(bundle), "url": f"file://{fork}"}[form]
    assert findings(series, tmp_path, given) == []
    # The bundle needs the base commit as its prerequisite: a bundle of another base fails clearly.
    if form == "bundle-path":
        other = tmp_path / "other"
        make_fork(other, files={**PRISTINE, b"vllm/extra.py": b"1\n"})
        bad = tmp_path / "bad.bundle"
        sh(["bundle", "create", "-q", str(bad), f"{BRANCH}~4..{BRANCH}"], cwd=other)
        found = findings(series, tmp_path, str(bad))
        assert [f.check for f in found] == ["fork-commits"]
        assert "fetching 'qwen38/0.29'" in found[0].message


def test_check_never_writes_to_the_fork(tmp_path: Path) -> None:
    fork, series, _base, _ = setup(tmp_path)
    (fork / "vllm" / "envs.py").write_bytes(b"dirty\n")
    git_dir = fork / ".git"

    def state() -> tuple[bytes, ...]:
        return (
            (git_dir / "index").read_bytes(),
            (git_dir / "HEAD").read_bytes(),
            (git_dir / "config").read_bytes(),
            sh(["for-each-ref"], cwd=fork),
            sh(["count-objects", "-v"], cwd=fork),
            (fork / "vllm" / "envs.py").read_bytes(),
        )

    before = state()
    findings(series, tmp_path, str(fork))
    assert state() == before


def test_export_point_option(tmp_path: Path) -> None:
    fork, series, _base, _ = setup(tmp_path)
    assert findings(series, tmp_path, str(fork), export_point="qwen38") == []
    report = run_check(
        series,
        source=pristine_dir(tmp_path),
        fork=str(fork),
        export_point="nope",
        pipeline=FORK_CHECKS,
    )
    assert any(
        f.severity == "problem" and "--export-point nope" in f.message for f in report.findings
    )


def test_no_fork_is_not_verified_not_a_silent_pass(tmp_path: Path) -> None:
    """A passing check used to say "all 15 checks hold" with no fork: two had not looked."""
    _fork, series, _base, _ = setup(tmp_path)
    found = findings(series, tmp_path, None)
    assert {(f.check, f.severity) for f in found} == {
        ("replay-identity", "unverified"),
        ("export", "unverified"),
        ("fork-commits", "unverified"),
    }
    report = run_check(series, source=pristine_dir(tmp_path), pipeline=FORK_CHECKS)
    assert report.not_verified == ("replay-identity", "export", "fork-commits")
    assert report.exit_code == 0 and report.to_json()["not_verified"] == list(report.not_verified)
    strict = run_check(
        series, source=pristine_dir(tmp_path), pipeline=FORK_CHECKS, require_fork=True
    )
    assert strict.exit_code == 1


def test_check_command_end_to_end_exit_codes(tmp_path: Path) -> None:
    """The whole pipeline through the real entry point: 0 on a clean fork, 1 naming the failure."""
    import subprocess
    import sys

    fork, series, _base, shas = setup(tmp_path)
    (series / "docker").mkdir()
    (series / "docker" / "requirements.txt").write_text("vllm==0.29.0\n")
    source = pristine_dir(tmp_path)

    def check(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "hyperqwen_patches",
                "check",
                "--repo",
                str(series),
                "--source",
                source,
                *extra,
            ],
            capture_output=True,
            text=True,
            check=False,
        )

    clean = check("--fork", str(fork), "--json")
    import json

    record = json.loads(clean.stdout)
    mine = {"replay-identity", "export", "fork-commits", "unfilled-rows"}
    assert mine <= set(record["checks"])
    # Other checks (static checks of the rows) have their own opinion of this hostile fixture's
    # CRLF and non-Python .py files; the fork checks must find nothing.
    assert [f for f in record["findings"] if f["check"] in mine] == []
    assert clean.returncode == (
        1 if any(f["severity"] == "error" for f in record["findings"]) else 0
    )
    sh(["reset", "-q", "--hard", shas[2]], cwd=fork)
    broken = check("--fork", str(fork), "--export-point", "qwen38")
    assert broken.returncode == 1
    assert "FAIL [fork-commits] new-module: row new-module has no commit" in broken.stdout


def test_a_fork_without_export_points_is_a_warning(tmp_path: Path) -> None:
    fork, series, _base, _ = setup(tmp_path)
    path = series / "patches" / "manifest.yaml"
    text = path.read_text()
    start, end = text.index("export_points:"), text.index("rows:")
    text = text[:start] + "export_points: []\n" + text[end:]
    path.write_text(re.sub(r"\n    (export_point|commit): .*", "", text))
    found = findings(series, tmp_path, str(fork))
    assert [(f.check, f.severity) for f in found] == [("replay-identity", "unverified")]
    assert "names no export point" in found[0].message


def test_an_unexportable_fork_commit_is_an_export_finding(tmp_path: Path) -> None:
    fork, series, _base, _ = setup(tmp_path)
    apply_commit(fork, 8, FixtureCommit("outside", "Touch setup.py", {b"setup.py": b"x\n"}))
    found = errors(findings(series, tmp_path, str(fork)))
    export_findings = [m for c, _s, m in found if c == "export"]
    assert len(export_findings) == 1 and "touches setup.py, outside vllm/" in export_findings[0]


def test_a_fork_commit_carrying_a_skipped_row_is_named(tmp_path: Path) -> None:
    fork, series, _base, _ = setup(tmp_path)
    path = series / "patches" / "manifest.yaml"
    text = path.read_text()
    at = text.index("  - name: new-module\n") + len("  - name: new-module\n")
    path.write_text(text[:at] + "    skip: superseded upstream\n" + text[at:])
    found = errors(findings(series, tmp_path, str(fork)))
    misplaced = [m for c, s, m in found if c == "fork-commits" and s == "new-module"]
    assert len(misplaced) == 1
    assert "carries row new-module, which is skipped (superseded upstream)" in misplaced[0]
    from hyperqwen_patches.errors import FindingError

    with pytest.raises(FindingError, match="carries row new-module, which is skipped"):
        exporting.plan_export(load_manifest(series), fork)

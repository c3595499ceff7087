"""``check``: invariants 1, 2, 3 and 6 on real repositories, each shown failing; the table, --json, exit
codes; nothing is ever written. Most tests use a small ``dir:`` pristine tree (no network); the tests
marked ``network`` use the real vLLM 0.29.0 wheel through the shared cache."""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hyperqwen_patches.checklist import PIPELINE
from hyperqwen_patches.checks.context import CheckContext, Finding
from hyperqwen_patches.checks.pipeline import CheckReport, run_check
from hyperqwen_patches.errors import ExitCode, UsageError
from hyperqwen_patches.series import render
from hyperqwen_patches.series.manifest import load_manifest
from hyperqwen_patches.series.manifestmodel import ManifestError

REPO = Path(__file__).resolve().parent.parent

ENVS = b"".join(b"VAR_%d = %d\n" % (i, i) for i in range(1, 31))
WORKER = (
    b"# worker\n"
    b"def f():\n    x = 1\n    return x\n\n"
    b"def g():\n    x = 1\n    return x\n\n"
    b"def h():\n    pass\n"
)
# This module's invariants (1, 2, 3, 6); the other checks of the pipeline are tested in their modules.
MINE = tuple(c for c in PIPELINE if c.__module__ == "hyperqwen_patches.checks.invariants")


def unified(path: str, old: bytes, new: bytes, subject: str = "change") -> bytes:
    body = difflib.diff_bytes(
        difflib.unified_diff,
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{path}".encode(),
        tofile=f"b/{path}".encode(),
        n=3,
    )
    return (
        f"From: Dev <dev@example.invalid>\nSubject: [PATCH] {subject}\n\n---\n".encode()
        + b"".join(body)
    )


ROWS = """\
  - name: envs-knob
    patch: patches/0001-envs-knob.patch
    kind: feature
    what: a knob | in envs
    cut_against: "0.29.0"
    retires_when: never
  - name: kvarn-modules
    files: kvarn/files
    kind: own
    what: KVarN modules
    cut_against: "0.29.0"
    retires_when: never
"""


def make_repo(tmp_path: Path, *, rows: str = ROWS) -> tuple[Path, Path]:
    """A repository whose series holds one patch row and one module row, on a dir: pristine tree."""
    pristine = tmp_path / "pristine"
    (pristine / "vllm").mkdir(parents=True)
    (pristine / "vllm/envs.py").write_bytes(ENVS)
    (pristine / "vllm/worker.py").write_bytes(WORKER)
    root = tmp_path / "repo"
    (root / "patches").mkdir(parents=True)
    (root / "docker").mkdir()
    (root / "docker/requirements.txt").write_text("# the image\nvllm==0.29.0\ntorch==2.13.0\n")
    (root / "patches/0001-envs-knob.patch").write_bytes(
        unified("vllm/envs.py", ENVS, ENVS.replace(b"VAR_10 = 10\n", b"VAR_10 = 10\nKNOB = 1\n"))
    )
    (root / "kvarn/files/vllm/v1").mkdir(parents=True)
    (root / "kvarn/files/vllm/v1/kvarn.py").write_bytes(b"K = 1\n")
    (root / "patches/manifest.yaml").write_text(
        f'format: 1\npin: "0.29.0"\npackage: vllm\nsource: dir:{pristine}\nrows:\n{rows}'
    )
    render.write(load_manifest(root))
    return root, pristine


def snapshot(*roots: Path) -> dict[str, tuple[bytes, int, int]]:
    out = {}
    for root in roots:
        for p in sorted(root.rglob("*")):
            st = p.lstat()
            out[str(p)] = (p.read_bytes() if p.is_file() else b"", st.st_mtime_ns, st.st_mode)
    return out


def hqp(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", *argv], capture_output=True, text=True, cwd=cwd
    )


def checked(root: Path, **options: object) -> CheckReport:
    """run_check on this module's invariants, asserting that it wrote nothing anywhere under the test's
    directory (the repository and the dir: pristine tree both live there)."""
    base = root.parent
    before = snapshot(base)
    report = run_check(root, pipeline=options.pop("pipeline", MINE), **options)  # type: ignore[arg-type]
    assert snapshot(base) == before
    return report


def messages(report_findings: tuple[Finding, ...]) -> list[tuple[str, str, str]]:
    return [(f.check, f.subject, f.message) for f in report_findings]


def test_green_series_table_and_json(tmp_path: Path) -> None:
    root, pristine = make_repo(tmp_path)
    before = snapshot(tmp_path)
    proc = hqp("check", cwd=root / "patches")  # the repository is found upward from the cwd
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"series on dir:{pristine}"
    header = lines[1].split()
    assert header == [
        "row",
        "┃",
        "files",
        "┃",
        "hunks",
        "┃",
        "exact",
        "┃",
        "at",
        "offset",
        "┃",
        "status",
    ]
    assert any(
        line.split()[:2] == ["envs-knob", "│"] and line.split()[-1] == "exact" for line in lines
    )
    assert any(line.split()[0] == "kvarn-modules" and line.split()[-1] == "exact" for line in lines)
    summary = lines[-1]
    # No fork here: the three fork checks say they did not look, and are not counted as holding.
    assert summary.startswith(
        "check: 12 of 15 checks hold, 3 not verified (replay-identity, export, fork-commits); "
    )
    assert summary.endswith(f"; 2 rows applied onto dir:{pristine}")
    proc = hqp("check", "--repo", str(root), "--json")
    assert proc.returncode == 0
    data = json.loads(proc.stdout)
    assert data["ok"] is True and data["exit_code"] == 0
    assert [f for f in data["findings"] if f["severity"] not in ("warning", "unverified")] == []
    assert data["not_verified"] == ["replay-identity", "export", "fork-commits"]
    assert data["checks"][:4] == ["pin", "series", "apply", "render"]
    envs, kvarn = data["rows"]
    assert (
        envs["row"],
        envs["files"],
        envs["hunks"],
        envs["exact"],
        envs["at_offset"],
        envs["status"],
    ) == ("envs-knob", 1, 1, 1, 0, "exact")
    assert envs["hunk_results"] == [
        {
            "path": "vllm/envs.py",
            "hunk": 1,
            "stated_line": 8,
            "applied_line": 8,
            "offset": 0,
            "status": "exact",
            "other_matches": [],
            "other_count": 0,
        }
    ]
    assert kvarn["status"] == "exact" and kvarn["files"] == 1
    assert snapshot(tmp_path) == before  # never writes: not the repository, not the pristine tree


def test_exit_codes_are_documented_in_help() -> None:
    proc = hqp("check", "--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "Exit codes: 0 every invariant holds or could not be verified" in text
    assert "'not verified' never counts as holding" in text
    assert "1 a finding (an invariant is broken); 2 a usage or environment problem" in text
    for option in ("--repo", "--source", "--max-offset", "--json", "--require-fork"):
        assert option in text


def test_invariant_1_pin_disagrees(tmp_path: Path) -> None:
    root, _ = make_repo(tmp_path)
    (root / "docker/requirements.txt").write_text("vllm==0.30.0\n")
    report = checked(root)
    assert report.exit_code == ExitCode.FINDING
    assert messages(report.findings) == [
        (
            "pin",
            "docker/requirements.txt:1",
            "vllm==0.30.0 disagrees with the manifest pin 0.29.0 (patches/manifest.yaml); the pin is "
            "stated once, everything else must equal it",
        ),
    ]
    (root / "docker/requirements.txt").write_text("torch\n")
    assert messages(checked(root).findings) == [
        (
            "pin",
            "docker/requirements.txt",
            "docker/requirements.txt does not name vllm; it must pin vllm==0.29.0",
        )
    ]
    # A series repository without the file has nothing to disagree with: the table says so (#38).
    (root / "docker/requirements.txt").unlink()
    report = checked(root)
    pin = [f for f in report.findings if f.check == "pin"]
    assert [(f.severity, f.message) for f in pin] == [
        ("note", "not present: no file states the pin here; nothing to compare")
    ]
    # requirements: null: the file there pins another build's release, not this series'.
    (root / "docker/requirements.txt").write_text("vllm==0.28.0\n")
    manifest = root / "patches/manifest.yaml"
    manifest.write_text(manifest.read_text() + "requirements: null\n")
    pin = [f for f in checked(root).findings if f.check == "pin"]
    assert [f.severity for f in pin] == ["note"]
    assert "requirements: null" in pin[0].message


def test_invariant_2_files_rows_and_series_both_ways(tmp_path: Path) -> None:
    root, _ = make_repo(tmp_path)
    (root / "patches/0002-stray.patch").write_bytes(b"")
    (root / "kvarn/0003-register.diff").write_bytes(b"")
    (root / "kvarn/README.md").write_text("not carried\n")  # only patch and module files count
    (root / "patches/0001-envs-knob.patch").rename(root / "patches/0001-renamed.patch")
    report = checked(root)
    series = [(s, m) for c, s, m in messages(report.findings) if c == "series"]
    assert series == [
        (
            "patches/manifest.yaml:6",
            "row envs-knob: patch file patches/0001-envs-knob.patch does not exist",
        ),
        ("patches/0001-renamed.patch", "patch file that no row of patches/manifest.yaml names"),
        ("patches/0002-stray.patch", "patch file that no row of patches/manifest.yaml names"),
        ("kvarn/0003-register.diff", "patch file that no row of patches/manifest.yaml names"),
    ]
    # The missing file is also why the row cannot be applied (invariant 3 names it too).
    assert (
        "apply",
        "row envs-knob",
        "row envs-knob (patches/0001-envs-knob.patch): the patch file patches/0001-envs-knob.patch does not exist",
    ) in messages(report.findings)
    assert report.exit_code == ExitCode.FINDING


def test_invariant_2_module_file_outside_any_row(tmp_path: Path) -> None:
    root, _ = make_repo(tmp_path, rows=ROWS.split("  - name: kvarn-modules")[0])
    render.write(load_manifest(root))
    report = checked(root)
    assert messages(report.findings) == [
        (
            "series",
            "kvarn/files/vllm/v1/kvarn.py",
            "module file that no row of patches/manifest.yaml names",
        )
    ]


def test_invariant_2_series_file_disagrees(tmp_path: Path) -> None:
    root, _ = make_repo(tmp_path)
    series = root / "patches/series"
    series.write_text("# hand-edited\n0009-unknown.patch\n0009-unknown.patch\n")
    report = checked(root)
    assert [(s, m) for c, s, m in messages(report.findings) if c == "series"] == [
        ("patches/series:2", "0009-unknown.patch is not a row of patches/manifest.yaml"),
        ("patches/series:3", "0009-unknown.patch is listed more than once"),
        ("patches/series", "row envs-knob (0001-envs-knob.patch) is missing from patches/series"),
    ]
    assert [s for c, s, _ in messages(report.findings) if c == "render"] == ["patches/series"]
    series.unlink()
    assert (
        "series",
        "patches/series",
        "patches/series does not exist (run: hyperqwen-patches render)",
    ) in messages(checked(root).findings)


def test_invariant_2_series_order(tmp_path: Path) -> None:
    rows = ROWS + (
        "  - name: second\n    patch: patches/0002-second.patch\n    kind: fix\n    what: w\n"
        '    cut_against: "0.29.0"\n    retires_when: never\n'
    )
    root, _ = make_repo(tmp_path, rows=rows)
    (root / "patches/0002-second.patch").write_bytes(
        unified("vllm/envs.py", ENVS, ENVS.replace(b"VAR_20 = 20\n", b"VAR_20 = 21\n"))
    )
    render.write(load_manifest(root))
    assert checked(root).exit_code == ExitCode.OK
    (root / "patches/series").write_text("0002-second.patch\n0001-envs-knob.patch\n")
    found = [m for c, _, m in messages(checked(root).findings) if c == "series"]
    assert found == [
        "the order differs from the manifest's: 0002-second.patch, 0001-envs-knob.patch "
        "(manifest: 0001-envs-knob.patch, 0002-second.patch)"
    ]


def test_invariant_3_failed_hunk_names_row_file_hunk_and_near_miss(tmp_path: Path) -> None:
    root, pristine = make_repo(tmp_path)
    (pristine / "vllm/envs.py").write_bytes(ENVS.replace(b"VAR_9 = 9\n", b"VAR_9 = 99\n"))
    report = checked(root)
    assert report.exit_code == ExitCode.FINDING
    [finding] = [f for f in report.findings if f.check == "apply"]
    assert finding.subject == "row envs-knob: vllm/envs.py hunk #1"
    # The hunk's own line in its patch file comes first: that is where a maintainer looks.
    assert finding.message.startswith(
        "patches/0001-envs-knob.patch:7: does not apply at fuzz 0 (stated line 8; GNU patch: FAILED at 8)"
    )
    assert "5 of 6 preimage lines are there, with 1 other line among them" in finding.detail
    assert "\n  -VAR_9 = 9\n  +VAR_9 = 99\n" in finding.detail
    assert [r.status for r in report.rows] == ["failed", "exact"]
    proc = hqp("check", "--repo", str(root))
    assert proc.returncode == 1
    assert (
        "FAIL [apply] row envs-knob: vllm/envs.py hunk #1: patches/0001-envs-knob.patch:7: does not apply at fuzz 0"
        in proc.stdout
    )
    assert proc.stderr.startswith("error: check: 1 finding, 3 not verified (")
    assert proc.stderr.rstrip().endswith("checks); 1 of 2 rows applied")


def test_invariant_3_offsets_are_reported_and_bounded(tmp_path: Path) -> None:
    root, pristine = make_repo(tmp_path)
    (pristine / "vllm/envs.py").write_bytes(b"# moved\n" * 5 + ENVS)
    report = checked(root)
    assert report.exit_code == ExitCode.OK
    row = report.rows[0]
    assert (row.status, row.exact, row.offset) == ("offset", 0, 1)
    assert [(h.stated_line, h.applied_line, h.offset) for h in row.hunk_records] == [(8, 13, 5)]
    proc = hqp("check", "--repo", str(root))
    assert "  envs-knob: vllm/envs.py hunk #1 at line 13 (offset 5 lines)" in proc.stdout
    bounded = checked(root, max_offset=4)
    assert bounded.exit_code == ExitCode.FINDING
    assert [f.subject for f in bounded.findings] == ["row envs-knob: vllm/envs.py hunk #1"]
    assert checked(root, max_offset=5).exit_code == ExitCode.OK


def test_invariant_3_ambiguous_placement_fails(tmp_path: Path) -> None:
    rows = (
        "  - name: ambiguous\n    patch: patches/0001-envs-knob.patch\n    kind: fix\n    what: w\n"
        '    cut_against: "0.29.0"\n    retires_when: never\n'
    )
    root, _ = make_repo(tmp_path, rows=rows)
    (root / "kvarn").rename(tmp_path / "kvarn-away")
    # A hunk whose preimage ("    x = 1", "    return x", "") is in f() and, word for word, in g().
    (root / "patches/0001-envs-knob.patch").write_bytes(
        b"--- a/vllm/worker.py\n+++ b/vllm/worker.py\n@@ -3,3 +3,3 @@\n     x = 1\n-    return x\n+    return x + 1\n \n"
    )
    report = checked(root)
    assert report.rows[0].status == "ambiguous"
    [finding] = [f for f in report.findings if f.check == "apply"]
    assert finding.subject == "row ambiguous: vllm/worker.py hunk #1"
    assert finding.message == (
        "patches/0001-envs-knob.patch:3: ambiguous: its context matches at line 3 and also at 7"
    )


def test_invariant_3_already_upstream(tmp_path: Path) -> None:
    root, pristine = make_repo(tmp_path)
    (pristine / "vllm/envs.py").write_bytes(
        ENVS.replace(b"VAR_10 = 10\n", b"VAR_10 = 10\nKNOB = 1\n")
    )
    report = checked(root)
    assert report.rows[0].status == "already-applied"
    assert [f.message for f in report.findings if f.check == "apply"] == [
        f"already applied on the pristine tree dir:{pristine}: the release carries it; retire the row"
    ]


def test_invariant_3_module_file_colliding_with_the_tree(tmp_path: Path) -> None:
    root, _ = make_repo(tmp_path)
    (root / "kvarn/files/vllm/worker.py").write_bytes(b"mine\n")
    report = checked(root)
    assert report.rows[1].status == "failed"
    assert messages(report.findings) == [
        ("apply", "row kvarn-modules: vllm/worker.py", "cannot create it: file exists")
    ]


def test_skipped_rows_are_listed_not_applied(tmp_path: Path) -> None:
    rows = ROWS + (
        "  - name: gone\n    patch: patches/0009-gone.patch\n    kind: fix\n    what: w\n"
        '    cut_against: "0.28.0"\n    retires_when: x\n    skip: "carried | upstream"\n'
    )
    root, _ = make_repo(tmp_path, rows=rows)
    (root / "patches/0009-gone.patch").write_bytes(b"garbage, never parsed for applying\n")
    render.write(load_manifest(root))
    report = checked(root)
    assert report.exit_code == ExitCode.OK, report.findings
    assert [(r.row, r.status, r.note) for r in report.rows][-1] == (
        "gone",
        "skipped",
        "carried | upstream",
    )


def test_invariant_6_stale_ledger_shows_a_diff(tmp_path: Path) -> None:
    root, _ = make_repo(tmp_path)
    (root / "PATCHES.md").write_text(
        (root / "PATCHES.md").read_text().replace("KVarN modules", "stale")
    )
    report = checked(root)
    [finding] = report.findings
    assert (finding.check, finding.subject) == ("render", "PATCHES.md")
    assert "-| 2 | kvarn-modules | kvarn/files/ | own | stale |" in finding.detail
    assert "+| 2 | kvarn-modules | kvarn/files/ | own | KVarN modules |" in finding.detail


def test_invalid_manifest_is_exit_2_before_any_check(tmp_path: Path) -> None:
    root, _ = make_repo(tmp_path)
    (root / "patches/manifest.yaml").write_text(
        "format: 1\npin: 0.29\npackage: vllm\nrows: []\nextra: 1\n"
    )
    with pytest.raises(ManifestError) as info:
        checked(root)
    assert [str(p) for p in info.value.problems] == [
        "patches/manifest.yaml:5: extra: unknown key (known: format, pin, package, rows, source, paths, export_points, retirements, knob_prefixes, accepted_names, runtime_knobs, series, requirements, checksums, series_tail)",
        "patches/manifest.yaml:2: pin: must be a string, got a number (quote it)",
    ]
    before = snapshot(tmp_path)
    proc = hqp("check", "--repo", str(root), "--json")
    assert proc.returncode == 2
    data = json.loads(proc.stdout)  # --json readers get the problems as records too
    assert (data["ok"], data["exit_code"]) == (False, 2)
    assert data["error"].startswith("patches/manifest.yaml: 2 problems in the manifest")
    assert [(p["path"], p["line"], p["field"], p["message"]) for p in data["problems"]] == [
        (
            "patches/manifest.yaml",
            5,
            "extra",
            "unknown key (known: format, pin, package, rows, source, paths, export_points, retirements, knob_prefixes, accepted_names, runtime_knobs, series, requirements, checksums, series_tail)",
        ),
        ("patches/manifest.yaml", 2, "pin", "must be a string, got a number (quote it)"),
    ]
    assert "patches/manifest.yaml: 2 problems in the manifest" in proc.stderr
    assert snapshot(tmp_path) == before


def test_unobtainable_pristine_is_exit_2_and_other_checks_still_run(tmp_path: Path) -> None:
    root, _ = make_repo(tmp_path)
    report = checked(root, source=f"dir:{tmp_path / 'nowhere'}")
    assert report.exit_code == ExitCode.USAGE
    assert [(f.check, f.severity) for f in report.findings] == [("apply", "problem")]
    assert (
        report.findings[0].message == f"source dir:{tmp_path / 'nowhere'}: no vllm/ directory in it"
    )
    assert [r.status for r in report.rows] == ["not-run", "not-run"]
    with pytest.raises(UsageError, match="is not understood"):
        run_check(root, source="ftp:x", pipeline=MINE)
    proc = hqp("check", "--repo", str(root), "--source", f"dir:{tmp_path / 'nowhere'}")
    assert proc.returncode == 2
    # one cause, told once, naming every check it stopped
    (error,) = [line for line in proc.stdout.splitlines() if line.startswith("ERROR ")]
    assert error.startswith("ERROR [apply, ") and "] source dir:" in error, proc.stdout


def always_fails(ctx: CheckContext) -> list[Finding]:
    return [Finding("extra", "error", "everything", f"{len(ctx.manifest.rows)} rows seen")]


def test_a_new_check_is_one_pipeline_entry(tmp_path: Path) -> None:
    root, _ = make_repo(tmp_path)
    report = run_check(root, pipeline=(*MINE, always_fails))
    assert report.checks == ("pin", "series", "apply", "render", "always-fails")
    assert messages(report.findings) == [("extra", "everything", "2 rows seen")]
    assert report.exit_code == ExitCode.FINDING


@pytest.mark.network
def test_shipped_series_checks_green() -> None:
    """The repository's own series: pin, files, rows and ledger agree, and every row applies exactly
    onto the real 0.29.0 wheel (what `./hqp check` runs in CI, without the fork checks)."""
    report = run_check(REPO, pipeline=MINE)
    assert report.findings == (), report.findings
    assert all(r.status in ("exact", "offset", "skipped") for r in report.rows), report.rows


def _envs_patch_for_real_wheel(tree_envs: bytes) -> bytes:
    anchor = b"import os\n"
    assert tree_envs.count(anchor) >= 1
    new = tree_envs.replace(anchor, anchor + b"HQP_TEST_KNOB = 1\n", 1)
    return unified("vllm/envs.py", tree_envs, new)


@pytest.mark.network
def test_real_wheel_check_is_green_and_warm_checks_agree(tmp_path: Path) -> None:
    from hyperqwen_patches.sources.pristine import open_pristine

    with open_pristine("pypi:vllm==0.29.0", version="0.29.0") as tree:
        envs = tree.read(b"vllm/envs.py")
    assert envs is not None
    root, _ = make_repo(tmp_path)
    manifest = (root / "patches/manifest.yaml").read_text()
    (root / "patches/manifest.yaml").write_text(
        "\n".join(line for line in manifest.splitlines() if not line.startswith("source:")) + "\n"
    )
    (root / "patches/0001-envs-knob.patch").write_bytes(_envs_patch_for_real_wheel(envs))
    render.write(load_manifest(root))
    exe = Path(sys.executable).with_name("hyperqwen-patches")
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "hyperqwen_patches"]
    # Three runs: the cold one and two warm ones (served from the caches) print the same result. How
    # fast a warm check is, is benchmarks/bench_check.py's figure (docs/performance.md), not a test's.
    outputs = []
    for _ in range(3):
        proc = subprocess.run([*argv, "check", "--repo", str(root)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        outputs.append(proc.stdout)
    assert "2 rows applied onto pypi:vllm==0.29.0" in outputs[0]
    assert outputs[0] == outputs[1] == outputs[2]


def test_check_never_writes_even_when_everything_fails(tmp_path: Path) -> None:
    root, pristine = make_repo(tmp_path)
    (pristine / "vllm/envs.py").write_bytes(b"")
    (root / "PATCHES.md").write_text("x\n")
    (root / "docker/requirements.txt").write_text("vllm==1\n")
    os.chmod(root / "patches/series", 0o444)
    before = snapshot(tmp_path)
    proc = hqp("check", "--repo", str(root))
    assert proc.returncode == 1
    assert snapshot(tmp_path) == before


def test_a_cache_path_that_is_a_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """It was a raw NotADirectoryError traceback (exit 1). The shipped series reads the release
    through the cache (a dir: source would not touch it)."""
    root = Path(__file__).resolve().parent.parent
    blocker = tmp_path / "cache-is-a-file"
    blocker.write_text("")
    proc = subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", "check", "--repo", str(root)],
        capture_output=True,
        text=True,
        env={**os.environ, "HQP_CACHE": str(blocker)},
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: ") and "hint: the cache is" in proc.stderr


def test_a_passing_check_says_what_it_verified_against() -> None:
    """The reviewer's question: against which fork, bundle bytes, tip and base did it hold? The
    shipped series answers with the bundle's sha256 (recomputed here), its tip and the base commit;
    JSON says the same per check."""
    import hashlib

    proc = hqp("check", cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bundle = hashlib.sha256((REPO / "patches/fork.bundle").read_bytes()).hexdigest()
    text = proc.stdout
    assert "checks:\n  held " in text and "against:\n  pristine      pypi:vllm==0.29.0" in text
    assert f"(sha256 {bundle})" in text
    doc = json.loads(hqp("check", "--json", cwd=REPO).stdout)
    assert set(doc["status"]) == set(doc["checks"]) and set(doc["status"].values()) == {"held"}
    fork = doc["against"]["fork"]
    assert fork["sha256"] == bundle and set(fork["tips"]) == {"qwen38"}
    manifest = load_manifest(REPO)
    assert fork["tips"]["qwen38"] == manifest.export_points[0].commit
    assert fork["base"] == manifest.export_points[0].base


def test_without_a_fork_the_fork_checks_say_not_verified(tmp_path: Path) -> None:
    root, _ = make_repo(tmp_path)
    proc = hqp("check", cwd=root)
    assert "  fork          none" in proc.stdout
    doc = json.loads(hqp("check", "--json", cwd=root).stdout)
    assert doc["status"]["replay-identity"] == "not verified"
    assert "fork" not in doc["against"]


def test_help_lists_every_check_of_the_pipeline_one_a_line() -> None:
    from hyperqwen_patches.checks.pipeline import check_name

    proc = hqp("check", "--help")
    lines = [line.split() for line in proc.stdout.splitlines()]
    listed = [words[0] for words in lines if len(words) > 1]
    for target in PIPELINE:
        assert check_name(target) in listed, check_name(target)

"""``adopt`` on a realistic 52-file series (tests/realseries.py), then ``check``, ``apply`` twice and
``--check-applied`` on it, with GNU patch 2.7.6 as the oracle for every tree.

The incident: a real series kept with shell scripts (48 series files plus 4 applied after them) had
no way in (the manifest took a hand-made script), ``check`` could never pass on it (four runtime-only
knobs kept off the compile key on purpose), and re-applying it failed for 10 of 52 files because later
rows edit lines earlier rows added, while ``--check-applied`` said all 52 were present.
"""

from __future__ import annotations

import fcntl
import filecmp
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import require_gnu_patch
from realseries import PIN, RUNTIME_KNOBS, Project, write_project
from seriesfolder import write_next_release

from hyperqwen_patches.engine.applying import apply_series
from hyperqwen_patches.series.manifest import load_manifest
from hyperqwen_patches.series.rows import SeriesRow, default_series
from hyperqwen_patches.sources.tree import Tree

KNOB_ARGS = [x for k in RUNTIME_KNOBS for x in ("--runtime-knob", f"{k}: read at run time only")]


def hqp(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return write_project(tmp_path_factory.mktemp("realseries"))


@pytest.fixture
def project(generated: Project, tmp_path: Path) -> Project:
    """A fresh copy of the generated project (adopt writes into it)."""
    root = tmp_path / "project"
    shutil.copytree(generated.root, root)
    return Project(root, generated.pristine, generated.series_files, generated.quirks)


def adopt(project: Project, *extra: str) -> subprocess.CompletedProcess[str]:
    return hqp(
        "adopt",
        "patches/series",
        "--append",
        "kvarn/apply-order",
        "--modules",
        "kvarn/modules",
        "--source",
        f"dir:{project.pristine}",
        *extra,
        cwd=project.root,
    )


def gnu_tree(project: Project, dest: Path, rows: list[int] | None = None) -> Path:
    """The release with the series applied by a GNU patch loop (1-based rows; default: all) and the
    module directory copied, as the project's shell scripts do it."""
    shutil.copytree(project.pristine, dest)
    patch = require_gnu_patch()
    chosen = rows if rows is not None else list(range(1, len(project.series_files) + 1))
    for n in chosen:
        with open(project.root / project.series_files[n - 1], "rb") as fh:
            subprocess.run(
                [patch, "-p1", "--fuzz", "0", "-s", "--no-backup-if-mismatch"],
                stdin=fh,
                cwd=dest / "vllm",
                check=True,
            )
    if rows is None:
        shutil.copytree(project.root / "kvarn/modules", dest / "vllm", dirs_exist_ok=True)
    return dest


def same_tree(a: Path, b: Path) -> bool:
    cmp = filecmp.dircmp(a, b)

    def walk(c: filecmp.dircmp[str]) -> bool:
        if c.left_only or c.right_only or c.diff_files or c.funny_files:
            return False
        # dircmp compares stat signatures; compare bytes to be sure
        for name in c.common_files:
            if Path(c.left, name).read_bytes() != Path(c.right, name).read_bytes():
                return False
        return all(walk(sub) for sub in c.subdirs.values())

    return walk(cmp)


def snapshot(root: Path) -> dict[str, tuple[int, int, bytes]]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = Path(dirpath, name)
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_mode, st.st_mtime_ns, p.read_bytes())
    return out


def test_the_fixture_has_its_quirks(generated: Project) -> None:
    """The generator's promises, checked on its output (so the tests below test what they say)."""
    texts = [(generated.root / f).read_text("utf-8") for f in generated.series_files]
    q = generated.quirks
    assert len(texts) == 52
    assert sum(t.count("\n@@ ") for t in texts) >= 180
    assert all("\n--- a/vllm/" not in t for t in texts)  # package-relative paths
    earlier, later = q.layered[0]
    assert f"# row {later}: revised row {earlier}:" in texts[later - 1]
    assert "diff --git a/" in texts[q.git_mismatch - 1] and ".orig b/" in texts[q.git_mismatch - 1]
    assert "index 1a2b3c4..5d6e7f8 100755" in texts[q.index_mode - 1]
    assert "\n---\n--- exported from fork@0123abcd ---\n" in texts[q.lone_dashes - 1]
    assert "Cut-against: 0.31.0: adapted to #54809" in "".join(texts)
    assert "Núñez" in texts[0] and "façade" in texts[0]
    assert all(k in texts[q.runtime_knobs - 1] for k in RUNTIME_KNOBS)
    assert "Kind:" not in texts[q.missing_headers[1] - 1]
    series = (generated.root / "patches/series").read_text()
    assert series.startswith("#") and "\n\n" in series


def test_a_layered_series_cannot_be_re_applied_forward(generated: Project, tmp_path: Path) -> None:
    """Why re-apply needs more than GNU's per-file --forward: on the patched tree the layered rows'
    forward and reverse attempts both fail (what `apply` did before engine/carried.py)."""
    tree = gnu_tree(generated, tmp_path / "gnu")
    patches = [p.patch for p in default_series_of(generated, tmp_path) if p.patch is not None]
    again = apply_series(patches, Tree(tree).read)
    failed = [p.name for p in again.patches if not p.ok]
    earlier, _ = generated.quirks.layered[0]
    assert failed and any(name.endswith(f"-{earlier}") for name in failed)


def default_series_of(project: Project, tmp_path: Path) -> list[SeriesRow]:
    """The rows as SeriesRow objects, through an adopted copy of the project."""
    from hyperqwen_patches.series.rows import load_series

    copy = Project(tmp_path / "adopted", project.pristine, project.series_files, project.quirks)
    shutil.copytree(project.root, copy.root)
    assert adopt(copy, *KNOB_ARGS).returncode == 0
    return load_series(load_manifest(copy.root))


def test_adopt_writes_a_manifest_and_keeps_every_patch_byte_identical(project: Project) -> None:
    before = {f: (project.root / f).read_bytes() for f in project.series_files}
    proc = adopt(project, "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["pin"] == PIN and plan["pin_from"] == "docker/requirements.txt:2"
    assert plan["paths"] == "package"
    assert sorted(plan["written"]) == ["PATCHES.md", "patches/manifest.yaml", "patches/series"]
    assert {f: (project.root / f).read_bytes() for f in project.series_files} == before

    manifest = load_manifest(project.root)
    assert len(manifest.rows) == 53
    assert [r.patch for r in manifest.rows[:52]] == project.series_files
    assert manifest.rows[-1].files == "kvarn/modules" and manifest.rows[-1].kind == "own"
    noted = [r for r in manifest.rows if r.cut_note]
    assert noted and all(r.cut_against == PIN for r in noted)
    assert {r.cut_note for r in noted} <= {"adapted to #54809", "hand-resolved against #53110"}
    q = project.quirks
    unset = {i + 1: r.unset for i, r in enumerate(manifest.rows) if r.unset}
    assert set(unset) == {*q.missing_headers, 53}
    assert "what" not in unset[q.missing_headers[0]]  # that one kept its What: line
    ledger = (project.root / "PATCHES.md").read_text()
    assert "0.31.0 (adapted to \\#54809)" in ledger  # render escapes # in table cells


def test_adopt_then_check_passes(project: Project) -> None:
    assert adopt(project, *KNOB_ARGS).returncode == 0
    proc = hqp("check", "--json", cwd=project.root)
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, [f for f in report["findings"] if f["severity"] == "error"]
    warned = {f["subject"] for f in report["findings"] if f["check"] == "unfilled-rows"}
    assert len(warned) == 4  # three header-less patches and the module directory
    offsets = [r for r in report["rows"] if r["status"] == "offset"]
    assert len(offsets) == len(project.quirks.offset_rows)


def test_without_the_waiver_only_the_four_runtime_knobs_fail(project: Project) -> None:
    assert adopt(project).returncode == 0
    proc = hqp("check", "--json", cwd=project.root)
    assert proc.returncode == 1
    errors = [f for f in json.loads(proc.stdout)["findings"] if f["severity"] == "error"]
    assert sorted(f["message"].split()[0] for f in errors) == sorted(RUNTIME_KNOBS)
    assert all("runtime_knobs" in f["message"] for f in errors)


def test_apply_matches_gnu_then_is_a_no_op_then_verifies(project: Project, tmp_path: Path) -> None:
    assert adopt(project, *KNOB_ARGS).returncode == 0
    expected = gnu_tree(project, tmp_path / "gnu")
    site = tmp_path / "site"
    shutil.copytree(project.pristine, site)
    first = hqp("apply", site, "--repo", project.root)
    assert first.returncode == 0, first.stderr
    assert same_tree(site, expected)

    before = snapshot(site)
    again = hqp("apply", site, "--repo", project.root, "--json")
    assert again.returncode == 0, again.stdout[-2000:]
    payload = json.loads(again.stdout)
    assert payload["written"] == [] and payload["carried"] == 53
    assert {p["status"] for p in payload["patches"]} == {"already-applied"}
    assert snapshot(site) == before  # not a byte, mode or mtime changed

    checked = hqp("apply", site, "--repo", project.root, "--check-applied")
    assert checked.returncode == 0, checked.stdout


def test_a_tree_carrying_the_first_rows_gets_the_rest(project: Project, tmp_path: Path) -> None:
    assert adopt(project, *KNOB_ARGS).returncode == 0
    # Row 20 is carried and row 44 (layered on it) is not: the state a half-done build leaves.
    site = gnu_tree(project, tmp_path / "site", rows=list(range(1, 21)))
    proc = hqp("apply", site, "--repo", project.root, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["carried"] == 20
    assert same_tree(site, gnu_tree(project, tmp_path / "gnu"))


def touched(project: Project, n: int) -> set[str]:
    text = (project.root / project.series_files[n - 1]).read_text("utf-8")
    return {line[6:] for line in text.splitlines() if line.startswith("+++ b/")}


def test_a_middle_row_missing_is_refused_by_name(project: Project, tmp_path: Path) -> None:
    assert adopt(project, *KNOB_ARGS).returncode == 0
    # A row no later row touches the files of: GNU applies the others without it.
    missing = next(
        n
        for n in range(2, 40)
        if not touched(project, n) & set().union(*(touched(project, m) for m in range(n + 1, 53)))
    )
    rows = [n for n in range(1, 53) if n != missing]
    site = gnu_tree(project, tmp_path / "site", rows=rows)
    before = snapshot(site)
    proc = hqp("apply", site, "--repo", project.root)
    assert proc.returncode == 1
    name = load_manifest(project.root).rows[missing - 1].name
    assert f"but not {name} before them" in proc.stderr, proc.stderr
    assert "nothing was written" in proc.stderr
    assert snapshot(site) == before


def test_apply_on_a_directory_without_the_package_is_a_usage_error(
    project: Project, tmp_path: Path
) -> None:
    assert adopt(project, *KNOB_ARGS).returncode == 0
    venv = tmp_path / "venv"
    (venv / "lib").mkdir(parents=True)
    proc = hqp("apply", venv, "--repo", project.root)
    assert proc.returncode == 2
    assert "has no such directory" in proc.stderr and "vllm/" in proc.stderr


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: _append(r / "patches/series", "0099-missing.patch\n"), "does not exist"),
        (
            lambda r: _append(r / "patches/series", "0001-" + _first(r)[5:] + "\n"),
            "is listed twice (first at patches/series:3)",
        ),
        (
            lambda r: (
                (r / "patches/notes.patch").write_text("just some notes\n"),
                _append(r / "patches/series", "notes.patch\n"),
            ),
            "notes.patch is not a patch",
        ),
        (lambda r: _append(r / "patches/series", _first(r) + " -p0\n"), "option '-p0'"),
    ],
    ids=["missing", "duplicate", "not-a-patch", "p0"],
)
def test_bad_series_is_refused_naming_file_and_line(
    project: Project, edit: Callable[[Path], object], message: str
) -> None:
    edit(project.root)
    lines = (project.root / "patches/series").read_text().splitlines()
    proc = adopt(project)
    assert proc.returncode == 2, proc.stdout
    assert message in proc.stderr
    if message != "is listed twice (first at patches/series:3)":
        assert f"patches/series:{len(lines)}:" in proc.stderr
    assert not (project.root / "patches/manifest.yaml").exists()


def test_an_existing_manifest_needs_force(project: Project) -> None:
    assert adopt(project).returncode == 0
    again = adopt(project)
    assert again.returncode == 2 and "--force" in again.stderr
    # The rendered patches/series now lists the appended files too: re-adopt from it alone.
    forced = hqp(
        "adopt", "patches/series", "--modules", "kvarn/modules", "--force", cwd=project.root
    )
    assert forced.returncode == 0, forced.stderr
    assert len(load_manifest(project.root).rows) == 53


def test_a_bad_header_value_names_the_patch_line(project: Project) -> None:
    path = project.root / project.series_files[0]
    text = path.read_text("utf-8")
    path.write_text(text.replace("Kind: ", "Kind: bugfix-ish ", 1), "utf-8")
    proc = adopt(project)
    assert proc.returncode == 2
    line = text.splitlines().index(next(x for x in text.splitlines() if x.startswith("Kind:"))) + 1
    assert f"{project.series_files[0]}:{line}: Kind:" in proc.stderr


def _append(path: Path, text: str) -> None:
    with path.open("a") as fh:
        fh.write(text)


def _first(root: Path) -> str:
    return next(
        x for x in (root / "patches/series").read_text().splitlines() if x and not x.startswith("#")
    )


def test_default_series_of_the_adopted_repository(project: Project) -> None:
    """The adopted rows come out with package paths prefixed (the engine sees one convention)."""
    assert adopt(project, *KNOB_ARGS).returncode == 0
    patches = default_series(project.root)
    assert len(patches) == 53
    assert all(fp.path.startswith(b"vllm/") for p in patches for fp in p.files)


def test_status_upto_and_unapply_walk_the_series(project: Project, tmp_path: Path) -> None:
    """quilt's applied / push ROW / pop -a, on the realistic series; GNU patch is the oracle for
    the half-way tree, the release itself for the tree unapplied."""
    assert adopt(project, *KNOB_ARGS).returncode == 0
    site = tmp_path / "site"
    shutil.copytree(project.pristine, site)

    def status() -> dict[str, object]:
        proc = hqp("status", site, "--repo", project.root, "--json")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    assert (status()["state"], status()["carried"]) == ("pristine", 0)
    twentieth = load_manifest(project.root).rows[19].name
    assert hqp("apply", site, "--repo", project.root, "--upto", twentieth).returncode == 0
    assert same_tree(site, gnu_tree(project, tmp_path / "gnu20", rows=list(range(1, 21))))
    assert (status()["state"], status()["carried"]) == ("partial", 20)
    assert hqp("apply", site, "--repo", project.root).returncode == 0
    assert (status()["state"], status()["carried"]) == ("complete", 53)
    # One writer per directory: while another run holds DIR's lock, unapply and status wait, then
    # refuse with one line (HQP_LOCK_WAIT), and nothing is written.
    before = snapshot(site)
    lock = os.open(site, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        os.environ["HQP_LOCK_WAIT"] = "0.2"
        for command in ("unapply", "status"):
            busy = hqp(command, site, "--repo", project.root)
            assert busy.returncode == 2 and "another run holds the lock on" in busy.stderr
    finally:
        os.environ.pop("HQP_LOCK_WAIT", None)
        os.close(lock)
    assert snapshot(site) == before
    proc = hqp("unapply", site, "--repo", project.root, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["taken_out"][0] == load_manifest(project.root).rows[-1].name
    assert same_tree(site, project.pristine)
    assert (status()["state"], status()["carried"]) == ("pristine", 0)
    bad = hqp("apply", site, "--repo", project.root, "--upto", "no-such-row")
    assert bad.returncode == 2 and "no such row" in bad.stderr


def test_status_names_a_state_no_run_leaves(project: Project, tmp_path: Path) -> None:
    assert adopt(project, *KNOB_ARGS).returncode == 0
    missing = next(
        n
        for n in range(2, 40)
        if not touched(project, n) & set().union(*(touched(project, m) for m in range(n + 1, 53)))
    )
    site = gnu_tree(project, tmp_path / "site", rows=[n for n in range(1, 53) if n != missing])
    before = snapshot(site)
    assert hqp("status", site, "--repo", project.root).returncode == 1
    refused = hqp("unapply", site, "--repo", project.root)
    assert refused.returncode == 1 and "nothing was written" in refused.stderr
    assert snapshot(site) == before


def test_list_reads_the_manifest_only(project: Project) -> None:
    assert adopt(project).returncode == 0
    proc = hqp("list", "--json", cwd=project.root)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["rows"]
    assert [r["patch"] for r in rows[:52]] == project.series_files
    table = hqp("list", cwd=project.root).stdout
    assert "0.31.0 (adapted to #54809)" in table


@pytest.mark.parametrize("json_flag", [False, True])
def test_a_nul_in_a_series_line_or_a_device_listed_is_refused_by_file_and_line(
    project: Project, json_flag: bool
) -> None:
    series = project.root / "patches/series"
    lines = series.read_text().splitlines()
    _append(series, "bad\0name.patch\n")
    extra = ("--json",) if json_flag else ()
    proc = adopt(project, *extra)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"patches/series:{len(lines) + 1}: a NUL byte in the line" in proc.stderr + proc.stdout
    if json_flag:  # one error document, nothing else on stdout
        import json

        doc = json.loads(proc.stdout)
        assert doc["ok"] is False and doc["exit_code"] == 2
    series.write_text("\n".join(lines) + "\n")
    import os
    import stat

    if os.geteuid() != 0:
        return  # a character device inside the repository needs root to make
    # /dev/zero's twin inside the repository: read whole, it would never end
    os.mknod(project.root / "patches/zero.patch", stat.S_IFCHR | 0o600, os.makedev(1, 5))
    _append(series, "zero.patch\n")
    proc = adopt(project)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "patches/zero.patch is not a file" in proc.stderr  # refused before it is read
    assert not (project.root / "patches/manifest.yaml").exists()


def test_import_works_right_after_adopt(project: Project, tmp_path: Path) -> None:
    """#38 item 3: the marker ``--- exported from fork@0123abcd ---`` names the export point, so
    ``import`` builds the fork at once and replays identically, step by step and at the tip."""
    assert adopt(project, *KNOB_ARGS).returncode == 0
    manifest = load_manifest(project.root)
    assert [(p.name, p.branch) for p in manifest.export_points] == [("fork", "fork")]
    fork = tmp_path / "fork"
    result = hqp("import", "--into", fork, "--create", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert "53 rows" in result.stdout + result.stderr
    check = hqp("check", "--fork", fork, cwd=project.root)
    lines = (check.stdout + check.stderr).splitlines()
    held = next(line for line in lines if line.strip().startswith("held"))
    assert "replay-identity" in held and "fork-commits" in held


def test_a_foreign_edit_in_the_realistic_series_is_named_by_file(
    project: Project, tmp_path: Path
) -> None:
    """Issue #39 at scale: every row's hunks are there, one touched file carries a line nobody's row
    adds. The reverse pass alone calls the tree complete; the release says which file is not."""
    assert adopt(project, *KNOB_ARGS).returncode == 0
    site = gnu_tree(project, tmp_path / "site")
    name = sorted(touched(project, 1))[0]
    target = site / "vllm" / name
    target.write_bytes(b"# a hand edit nobody's row makes\n" + target.read_bytes())
    proc = hqp("status", site, "--repo", project.root, "--json")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["state"] == "inconsistent" and doc["carried"] == 53
    assert [d["path"] for d in doc["divergent"]] == [f"vllm/{name}"]
    before = snapshot(site)
    refused = hqp("unapply", site, "--repo", project.root)
    assert (
        refused.returncode == 1 and f"vllm/{name} carries an earlier or foreign" in refused.stderr
    )
    assert snapshot(site) == before


def test_the_whole_chain_on_the_52_file_series(project: Project, tmp_path: Path) -> None:
    """#38's proof on this series: adopt -> check -> import -> the first export --check is format
    drift only (row 6 creates a file with a plain `--- /dev/null` diff, which export writes with
    `new file mode 100644`: not semantic) -> export -> check --fork (all hold) -> edit one row ->
    refresh -> export --check clean -> port --to a synthetic next release with no static error."""
    root = project.root
    assert adopt(project, *KNOB_ARGS).returncode == 0
    assert hqp("check", cwd=root).returncode == 0
    fork = tmp_path / "fork"
    assert hqp("import", "--into", fork, "--create", cwd=root).returncode == 0
    first = hqp("export", "--check", "--fork", fork, cwd=root)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "format drift only (52:" in first.stderr and "no semantic change" in first.stderr
    assert hqp("export", "--fork", fork, cwd=root).returncode == 0
    full = hqp("check", "--fork", fork, cwd=root)
    assert full.returncode == 0 and "all 15 checks hold" in full.stdout + full.stderr
    opened = hqp("edit", "--fork", fork, "request-draft-2", cwd=root)
    assert opened.returncode == 0, opened.stderr
    work = Path(opened.stdout.strip().splitlines()[-1])
    changed = sorted(p for p in work.rglob("*.py") if b"# row 2: floor" in p.read_bytes())[0]
    changed.write_bytes(changed.read_bytes().replace(b"# row 2: floor", b"# row 2: edited", 1))
    refreshed = hqp("refresh", "--fork", fork, cwd=root)
    assert refreshed.returncode == 0, refreshed.stderr
    assert b"# row 2: edited" in (root / project.series_files[1]).read_bytes()
    clean = hqp("export", "--check", "--fork", fork, cwd=root)
    assert clean.returncode == 0 and "every export is up to date" in clean.stderr
    assert hqp("check", "--fork", fork, cwd=root).returncode == 0
    nxt = tmp_path / "next"
    write_next_release(project.pristine, nxt, "0.32.0")
    proc = hqp("port", "--to", "0.32.0", "--source", f"dir:{nxt}", "--json", cwd=root)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    report = json.loads(proc.stdout)["reports"][0]
    assert {r["status"] for r in report["rows"]} <= {"exact", "offset"}
    statics = report["statics"] or {}
    assert [f for f in statics.get("findings", []) if f.get("severity") == "error"] == []


def test_re_adopting_with_the_same_append_says_the_rendered_series_has_them(
    project: Project,
) -> None:
    """A newcomer re-running the adopt command (with --force) gets the duplicate refused, and told
    why: the rendered patches/series lists the appended files already."""
    assert adopt(project, *KNOB_ARGS).returncode == 0
    again = adopt(project, *KNOB_ARGS, "--force")
    assert again.returncode == 2
    assert "is listed twice (first at patches/series:" in again.stderr
    assert "lists the appended files already: re-adopt it without --append" in again.stderr
    plain = hqp(
        "adopt",
        "patches/series",
        "--modules",
        "kvarn/modules",
        *KNOB_ARGS,
        "--force",
        cwd=project.root,
    )
    assert plain.returncode == 0, plain.stderr

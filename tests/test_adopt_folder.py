"""``adopt`` on a series kept in its own folder beside another release's (tests/seriesfolder.py), then
``check``, ``import``, ``check --fork``, ``export``, and ``apply`` against a GNU patch loop.

The incident (#38): an 18-row series in ``patches/vllm-0.29/`` with its own ``series``,
``SHA256SUMS``, a ``check_series.sh`` running ``git apply --check``, a README table, and a
``docker/requirements.txt`` pinning the previous release for another build. ``adopt`` took the prose
line ``kind: fix.`` for a header and refused the real block, refused ``--pin`` (or took the other
build's pin and replaced that build's ``patches/series`` and ``PATCHES.md``), wrote no export point
(so ``import`` refused), dropped the sums, ``git apply --check``, the series' comments and ``-p1``,
and failed both runtime knobs although a comment above them says why.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import require_gnu_patch
from seriesfolder import (
    BRANCH,
    FOLDER,
    KNOB_REASON,
    LINE_COMMENT,
    PIN,
    PROSE_KIND,
    RUNTIME_KNOBS,
    SERIES_TAIL,
    Project,
    write_next_release,
    write_project,
)


def hqp(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )


def _generated(factory: pytest.TempPathFactory, **options: bool) -> Project:
    return write_project(factory.mktemp("seriesfolder"), **options)


@pytest.fixture(scope="module")
def as_kept(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """The series as its maintainers keep it: one file saved with CRLF endings."""
    return _generated(tmp_path_factory)


@pytest.fixture(scope="module")
def lf_only(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """The same series with the CRLF file saved with LF (what this branch can check end to end)."""
    return _generated(tmp_path_factory, crlf=False)


@pytest.fixture(scope="module")
def root_paths(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """The same series with paths under vllm/ (paths: root), which export writes today."""
    return _generated(tmp_path_factory, crlf=False, root_paths=True)


def copy(project: Project, tmp_path: Path) -> Project:
    root = tmp_path / "project"
    shutil.copytree(project.root, root)
    return Project(
        root,
        project.pristine,
        project.series_files,
        project.other_files,
        project.quirks,
        project.shas,
    )


def adopt(project: Project, *extra: str) -> subprocess.CompletedProcess[str]:
    return hqp(
        "adopt",
        f"{FOLDER}/series",
        "--modules",
        f"{FOLDER}/modules",
        "--source",
        f"dir:{project.pristine}",
        *extra,
        cwd=project.root,
    )


def manifest_of(project: Project) -> dict:
    return yaml.safe_load((project.root / "patches/manifest.yaml").read_text("utf-8"))


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_the_fixture_has_its_quirks(as_kept: Project) -> None:
    root, q = as_kept.root, as_kept.quirks
    files = [root / f for f in as_kept.series_files]
    assert len(files) == 18
    assert b"\r\n" in files[q.crlf - 1].read_bytes()
    assert PROSE_KIND.encode() in files[q.prose_kind - 1].read_bytes()
    assert b"\nKind:" not in files[q.headerless[0] - 1].read_bytes()
    assert all(f"exported from {BRANCH} ".encode() in f.read_bytes() for f in files)
    assert f"# {KNOB_REASON}".encode() in files[q.knobs - 1].read_bytes()
    assert b"row 4:" in files[q.layered[1] - 1].read_bytes()  # the later row's context is row 4's
    assert (root / "docker/requirements.txt").read_text().splitlines()[-1] == "vllm==0.28.0"
    assert "git apply --check" in (root / FOLDER / "check_series.sh").read_text()
    assert "| 1 |" in (root / FOLDER / "README.md").read_text()
    # The series' own check holds on the pristine release (sha256sum -c, GNU patch, git apply).
    require_gnu_patch()
    run = subprocess.run(
        ["bash", str(root / FOLDER / "check_series.sh"), str(as_kept.pristine)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr


def test_adopt_takes_the_folder_as_it_is(as_kept: Project, tmp_path: Path) -> None:
    project = copy(as_kept, tmp_path)
    before = snapshot(project.root)
    result = adopt(project)
    assert result.returncode == 0, result.stderr
    assert f"pin {PIN} (from the rows' Cut-against:" in result.stderr
    after = snapshot(project.root)
    # The other release's series, ledger and pin are untouched; so is every patch file.
    for rel in [*project.other_files, "docker/requirements.txt", *project.series_files]:
        assert after[rel] == before[rel], rel
    # SHA256SUMS is rendered exactly as the project keeps it: not replaced.
    assert after[f"{FOLDER}/SHA256SUMS"] == before[f"{FOLDER}/SHA256SUMS"]
    written = sorted(set(after) - set(before))
    assert written == ["patches/manifest.yaml", f"{FOLDER}/PATCHES.md"]

    text = (project.root / "patches/manifest.yaml").read_text("utf-8")
    assert "$schema" not in text
    m = manifest_of(project)
    assert (m["pin"], m["paths"], m["series"], m["requirements"], m["checksums"]) == (
        PIN,
        "package",
        f"{FOLDER}/series",
        None,
        f"{FOLDER}/SHA256SUMS",
    )
    assert m["export_points"] == [{"name": "qwen38-0.29", "branch": BRANCH}]
    rows = m["rows"]
    # The series' script runs `git apply --check --ignore-whitespace`: each row states that flag.
    flags = ["--ignore-whitespace"]
    assert [r.get("git_apply", False) for r in rows] == [flags] * 18 + [False]  # the module row
    assert m["runtime_knobs"] == [{"name": k, "reason": KNOB_REASON} for k in RUNTIME_KNOBS]
    prose = rows[project.quirks.prose_kind - 1]
    assert prose["kind"] != "fix. retires when upstream takes it."
    assert "unset" not in prose
    continued = rows[project.quirks.continued - 1]
    assert continued["what"].count(":") == 1 and "  " not in continued["what"]
    assert rows[project.quirks.headerless[0] - 1]["unset"] == [
        "kind",
        "what",
        "cut_against",
        "retires_when",
    ]
    # The rendered series keeps the folder's comments and -p1, and lists the same files in order.
    old = before[f"{FOLDER}/series"].decode().splitlines()
    new = after[f"{FOLDER}/series"].decode().splitlines()
    assert [line for line in new if not line.startswith("# files:")][-len(old) :] == old


def test_the_rendered_series_is_the_adopted_file_byte_for_byte(
    as_kept: Project, tmp_path: Path
) -> None:
    """Every comment of the adopted series file comes back where it was: above an entry, after an
    entry on its line (quilt's `name -p1  # why`) and after the last entry; render adds only its
    own head and the module row's `# files:` line."""
    project = copy(as_kept, tmp_path)
    series = project.root / FOLDER / "series"
    before = series.read_bytes()
    assert f"-p1  # {LINE_COMMENT}\n".encode() in before
    assert before.endswith(f"\n# {SERIES_TAIL}\n".encode())
    assert adopt(project).returncode == 0
    after = series.read_bytes().splitlines(keepends=True)
    assert after[0].startswith(b"# The apply order of the series, rendered")
    kept = [line for line in after[5:] if not line.startswith(b"# files: modules/ (row ")]
    assert b"".join(kept) == before
    rows = manifest_of(project)["rows"]
    assert rows[2]["series_line_comment"] == f"  # {LINE_COMMENT}"
    assert manifest_of(project)["series_tail"] == f"\n# {SERIES_TAIL}\n"


def test_pin_given_beside_another_builds_pin(as_kept: Project, tmp_path: Path) -> None:
    project = copy(as_kept, tmp_path)
    result = adopt(project, "--pin", PIN, "--dry-run", "--json")
    assert result.returncode == 0, result.stderr
    assert '"requirements": null' in result.stdout
    assert '"pin_from": "--pin"' in result.stdout
    # For a repository's own patches/series the requirements file is the pin's statement: refused.
    (project.root / "patches/series").write_text(f"../{project.series_files[0]}\n")
    result = hqp("adopt", "patches/series", "--pin", PIN, cwd=project.root)
    assert result.returncode == 2
    assert "docker/requirements.txt:2: pins vllm==0.28.0, not --pin 0.29.0" in result.stderr


def test_adopt_then_check_passes(lf_only: Project, tmp_path: Path) -> None:
    project = copy(lf_only, tmp_path)
    assert adopt(project).returncode == 0
    result = hqp("check", cwd=project.root)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout + result.stderr
    assert "requirements: null" in out  # invariant 1 says why it compares nothing
    assert "12 of 15 checks hold" in out


def test_adopt_then_check_reads_the_crlf_file_as_gnu_patch_does(
    as_kept: Project, tmp_path: Path
) -> None:
    """The CRLF file applies as GNU patch 2.7.6 applies it (CRs stripped, a note naming CRLF, no
    whitespace finding), and the git apply contract holds as the series' own script holds it:
    `git apply --check --ignore-whitespace`, the flag adopt read from check_series.sh (plain
    `git apply --check --whitespace=error` refuses a CRLF patch on LF files)."""
    project = copy(as_kept, tmp_path)
    result = adopt(project)
    assert result.returncode == 0, result.stderr
    assert "check_series.sh:11 runs git apply --check --ignore-whitespace)" in result.stderr
    result = hqp("check", cwd=project.root)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "CRLF" in out
    assert "12 of 15 checks hold" in out
    held = next(line for line in out.splitlines() if line.strip().startswith("held"))
    assert " apply," in held and "whitespace" in held and "git-apply" in held
    # Without the flag the same rows fail the contract, for real: the flag is what makes it pass.
    path = project.root / "patches/manifest.yaml"
    text = path.read_text("utf-8")
    path.write_text(text.replace('git_apply: ["--ignore-whitespace"]', "git_apply: true"))
    plain = hqp("check", cwd=project.root)
    assert plain.returncode == 1
    assert "failed        git-apply" in plain.stdout + plain.stderr


def test_the_whole_chain_on_the_series_as_kept(as_kept: Project, tmp_path: Path) -> None:
    """#38's proof on the fixture as its maintainers keep it (CRLF file, package paths): adopt ->
    check -> import -> export -> check --fork (all hold) -> edit one row -> refresh -> export
    --check clean -> port --to a synthetic next release with no static error."""
    import json

    project = copy(as_kept, tmp_path)
    assert adopt(project).returncode == 0
    checked = hqp("check", cwd=project.root)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    fork = tmp_path / "fork"
    imported = hqp("import", "--into", fork, "--create", cwd=project.root)
    assert imported.returncode == 0, imported.stderr
    exported = hqp("export", "--fork", fork, cwd=project.root)
    assert exported.returncode == 0, exported.stderr
    full = hqp("check", "--fork", fork, cwd=project.root)
    assert full.returncode == 0, full.stdout + full.stderr
    assert "all 15 checks hold" in full.stdout + full.stderr
    opened = hqp("edit", "--fork", fork, "cache-token-2", cwd=project.root)
    assert opened.returncode == 0, opened.stderr
    work = Path(opened.stdout.strip().splitlines()[-1])
    changed = [p for p in work.rglob("*.py") if b"# row 2: tweak" in p.read_bytes()]
    assert changed
    changed[0].write_bytes(changed[0].read_bytes().replace(b"# row 2: tweak", b"# row 2: edited"))
    refreshed = hqp("refresh", "--fork", fork, cwd=project.root)
    assert refreshed.returncode == 0, refreshed.stderr
    assert b"# row 2: edited" in (project.root / project.series_files[1]).read_bytes()
    clean = hqp("export", "--check", "--fork", fork, cwd=project.root)
    assert clean.returncode == 0 and "every export is up to date" in clean.stderr, clean.stderr
    again = hqp("check", "--fork", fork, cwd=project.root)
    assert again.returncode == 0, again.stdout + again.stderr
    nxt = tmp_path / "next"
    write_next_release(project.pristine, nxt)
    proc = hqp("port", "--to", "0.30.0", "--source", f"dir:{nxt}", "--json", cwd=project.root)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    report = json.loads(proc.stdout)["reports"][0]
    assert {r["status"] for r in report["rows"]} <= {"exact", "offset"}
    errors = [
        f for f in (report["statics"] or {}).get("findings", []) if f.get("severity") == "error"
    ]
    assert errors == [], errors


def test_check_names_the_file_whose_sum_differs(lf_only: Project, tmp_path: Path) -> None:
    project = copy(lf_only, tmp_path)
    assert adopt(project).returncode == 0
    third = project.root / project.series_files[2]
    third.write_bytes(third.read_bytes().replace(b"honest", b"honest!", 1))  # prose only
    result = hqp("check", cwd=project.root)
    assert result.returncode == 1
    name = third.name
    assert f"{FOLDER}/SHA256SUMS:3: {name}: its sha256 is" in result.stdout
    # render rewrites the sums; the project's own sha256sum -c agrees, and check holds again.
    assert hqp("render", cwd=project.root).returncode == 0
    sums = subprocess.run(
        ["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=project.root / FOLDER, check=False
    )
    assert sums.returncode == 0
    assert hqp("check", cwd=project.root).returncode == 0


def test_adopt_refuses_sums_that_already_disagree(lf_only: Project, tmp_path: Path) -> None:
    project = copy(lf_only, tmp_path)
    sums = project.root / FOLDER / "SHA256SUMS"
    lines = sums.read_text().splitlines(keepends=True)
    lines[4] = hashlib.sha256(b"x").hexdigest() + lines[4][64:]
    sums.write_text("".join(lines))
    before = snapshot(project.root)
    result = adopt(project)
    assert result.returncode == 2
    assert f"{FOLDER}/SHA256SUMS:5: 0005-" in result.stderr
    assert snapshot(project.root) == before  # nothing written


def test_a_knob_without_its_comment_still_fails(tmp_path_factory: pytest.TempPathFactory) -> None:
    project = _generated(tmp_path_factory, crlf=False, knob_comment=False)
    assert adopt(project).returncode == 0
    assert "runtime_knobs" not in manifest_of(project)
    result = hqp("check", cwd=project.root)
    assert result.returncode == 1
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAIL [knobs]")]
    assert len(failed) == 2 and all("compile_factors' ignore list" in f for f in failed)


def test_check_accepts_a_commented_knob_and_shows_why(lf_only: Project, tmp_path: Path) -> None:
    project = copy(lf_only, tmp_path)
    assert adopt(project).returncode == 0
    path = project.root / "patches/manifest.yaml"
    text = path.read_text("utf-8")
    path.write_text(text[: text.index("runtime_knobs:")], encoding="utf-8")  # undeclare them
    result = hqp("check", cwd=project.root)
    assert result.returncode == 0, result.stdout
    for knob in RUNTIME_KNOBS:
        assert f"{knob} is kept off compile_factors' key by row" in result.stdout
    assert f"by the comment above it: {KNOB_REASON}" in result.stdout


def test_import_works_right_after_adopt(lf_only: Project, tmp_path: Path) -> None:
    project = copy(lf_only, tmp_path)
    assert adopt(project).returncode == 0
    fork = tmp_path / "fork"
    result = hqp("import", "--into", fork, "--create", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert f"{BRANCH}: " in result.stdout + result.stderr
    check = hqp("check", "--fork", fork, cwd=project.root)
    held = check.stdout + check.stderr
    assert "FAIL [replay-identity]" not in held and "FAIL [fork-commits]" not in held


def test_a_bare_diffs_preamble_survives_import_and_export_byte_for_byte(
    lf_only: Project, tmp_path: Path
) -> None:
    """#38: `import` took a bare diff's message from the row's name and `what` only, dropping the
    preamble's prose. Now the preamble (what `git am` reads as a message: all of it before the
    diff here) is the commit's body, export writes it back, and a re-import reads the same."""
    project = copy(lf_only, tmp_path)
    assert adopt(project).returncode == 0
    preambles = {}
    for rel in project.series_files:
        data = (project.root / rel).read_bytes()
        preambles[rel] = data[: data.index(b"diff --git ")]
    assert PROSE_KIND.encode() in preambles[project.series_files[project.quirks.prose_kind - 1]]
    fork = tmp_path / "fork"
    assert hqp("import", "--into", fork, "--create", cwd=project.root).returncode == 0
    log = subprocess.run(
        ["git", "-C", str(fork), "log", "--format=%B%x00", BRANCH],
        capture_output=True,
        check=True,
    ).stdout
    for rel, preamble in preambles.items():
        assert preamble.strip() + b"\n\nHqp-Row: " in log, rel
    assert hqp("export", "--fork", fork, cwd=project.root).returncode == 0
    for rel, preamble in preambles.items():
        exported = (project.root / rel).read_bytes()
        assert b"\n\n" + preamble.strip() + b"\n\nHqp-Row: " in exported, rel
    again = hqp("import", "--into", fork, cwd=project.root)
    assert "(unchanged;" in again.stdout + again.stderr
    clean = hqp("export", "--check", "--fork", fork, cwd=project.root)
    assert "every export is up to date" in clean.stderr


def test_check_fork_holds_after_import_of_the_package_series(
    lf_only: Project, tmp_path: Path
) -> None:
    project = copy(lf_only, tmp_path)
    assert adopt(project).returncode == 0
    fork = tmp_path / "fork"
    assert hqp("import", "--into", fork, "--create", cwd=project.root).returncode == 0
    assert hqp("export", "--fork", fork, cwd=project.root).returncode == 0
    assert hqp("check", "--fork", fork, cwd=project.root).returncode == 0


def test_first_export_after_adopt_is_format_drift_then_clean(
    root_paths: Project, tmp_path: Path
) -> None:
    project = copy(root_paths, tmp_path)
    assert adopt(project).returncode == 0
    fork = tmp_path / "fork"
    assert hqp("import", "--into", fork, "--create", cwd=project.root).returncode == 0
    check = hqp("export", "--check", "--fork", fork, cwd=project.root)
    assert check.returncode == 0, check.stderr
    labels = {line.split()[0] for line in check.stdout.splitlines() if line.endswith(")")}
    assert labels == {"format"}
    assert "format drift only (18:" in check.stderr
    assert hqp("export", "--fork", fork, cwd=project.root).returncode == 0
    again = hqp("export", "--check", "--fork", fork, cwd=project.root)
    assert "every export is up to date" in again.stderr
    sums = subprocess.run(
        ["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=project.root / FOLDER, check=False
    )
    assert sums.returncode == 0  # export re-summed the files it wrote
    full = hqp("check", "--fork", fork, cwd=project.root)
    assert full.returncode == 0, full.stdout
    assert "all 15 checks hold" in full.stderr + full.stdout


def test_apply_matches_a_gnu_patch_loop(lf_only: Project, tmp_path: Path) -> None:
    project = copy(lf_only, tmp_path)
    assert adopt(project).returncode == 0
    ours = tmp_path / "ours"
    shutil.copytree(project.pristine, ours)
    result = hqp("apply", ours, cwd=project.root)
    assert result.returncode == 0, result.stderr
    gnu = tmp_path / "gnu"
    shutil.copytree(project.pristine, gnu)
    patch = require_gnu_patch()
    for rel in project.series_files:
        with open(project.root / rel, "rb") as fh:
            subprocess.run(
                [patch, "-p1", "--fuzz", "0", "--batch", "--quiet"],
                stdin=fh,
                cwd=gnu / "vllm",
                check=True,
                capture_output=True,
            )
    shutil.copytree(project.root / FOLDER / "modules", gnu / "vllm", dirs_exist_ok=True)
    assert snapshot(ours) == snapshot(gnu)


def test_re_adopting_the_rendered_series_changes_nothing(lf_only: Project, tmp_path: Path) -> None:
    """Render's own header and module-row comment are not taken for the user's comments."""
    project = copy(lf_only, tmp_path)
    assert adopt(project).returncode == 0
    first = snapshot(project.root)
    again = adopt(project, "--force")
    assert again.returncode == 0, again.stderr
    assert snapshot(project.root) == first
    assert "wrote nothing new" in again.stderr


def test_edit_refresh_then_export_check_clean_and_sums_kept(
    root_paths: Project, tmp_path: Path
) -> None:
    project = copy(root_paths, tmp_path)
    assert adopt(project).returncode == 0
    fork = tmp_path / "fork"
    assert hqp("import", "--into", fork, "--create", cwd=project.root).returncode == 0
    assert hqp("export", "--fork", fork, cwd=project.root).returncode == 0
    opened = hqp("edit", "--fork", fork, "cache-token-2", cwd=project.root)
    assert opened.returncode == 0, opened.stderr
    work = Path(opened.stdout.strip().splitlines()[-1])
    changed = [p for p in work.rglob("*.py") if b"# row 2: tweak" in p.read_bytes()]
    assert changed
    changed[0].write_bytes(changed[0].read_bytes().replace(b"# row 2: tweak", b"# row 2: edited"))
    refreshed = hqp("refresh", "--fork", fork, cwd=project.root)
    assert refreshed.returncode == 0, refreshed.stderr
    assert f"{FOLDER}/SHA256SUMS" in refreshed.stdout + refreshed.stderr
    assert b"# row 2: edited" in (project.root / project.series_files[1]).read_bytes()
    clean = hqp("export", "--check", "--fork", fork, cwd=project.root)
    assert "every export is up to date" in clean.stderr
    assert hqp("check", "--fork", fork, cwd=project.root).returncode == 0
    sums = subprocess.run(
        ["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=project.root / FOLDER, check=False
    )
    assert sums.returncode == 0


def test_port_of_the_adopted_folder_to_a_next_release_reports_no_false_static_error(
    lf_only: Project, tmp_path: Path
) -> None:
    """#38's proof, last step: the adopted series ported to a synthetic next release where upstream
    moved every module (lines added at the top) but changed no signature or name the rows use: every
    row applies (at an offset) and `port` exits 0 with no static error. (This fixture's added lines
    reference few package names; the series' own widened signatures binding is held by
    tests/test_statics_names.py.)"""
    import json

    project = copy(lf_only, tmp_path)
    assert adopt(project).returncode == 0
    nxt = tmp_path / "next"
    assert write_next_release(project.pristine, nxt) > 5
    proc = hqp("port", "--to", "0.30.0", "--source", f"dir:{nxt}", "--json", cwd=project.root)
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads(proc.stdout)["reports"][0]
    statuses = {r["status"] for r in report["rows"]}
    assert statuses <= {"exact", "offset"}, statuses
    statics = report["statics"] or {}
    errors = [f for f in statics.get("findings", []) if f.get("severity") == "error"]
    assert errors == [], errors
    assert proc.returncode == 0, proc.stdout[-2000:]

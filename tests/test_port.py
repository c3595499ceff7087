"""``port``: classify every row of a series on another release, on small real trees.

Each case builds two tiny "releases" as directories (``dir:`` sources, the same reader as any other
pristine source), a repository with a real manifest and patch files made by GNU diff, and runs the
port core on it. Where a row applies, GNU patch 2.7.6 is the oracle for the offsets reported.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.fork import importing
from hyperqwen_patches.port.model import PortReport
from hyperqwen_patches.port.report import count_line, render_markdown
from hyperqwen_patches.port.run import port
from hyperqwen_patches.series.manifest import load_manifest
from hyperqwen_patches.sources.pristine import open_pristine
from tests.conftest import require_gnu_patch

BASE = "".join(f"line {i}\n" for i in range(1, 41))


def lines_with(changes: dict[int, str], text: str = BASE) -> str:
    out = text.splitlines(keepends=True)
    for number, new in sorted(changes.items(), reverse=True):
        out[number - 1] = new
    return "".join(out)


def release(root: Path, name: str, files: dict[str, str]) -> Path:
    """A pristine tree: a directory holding vllm/."""
    top = root / name
    for path, text in files.items():
        (top / path).parent.mkdir(parents=True, exist_ok=True)
        (top / path).write_text(text)
    (top / "vllm").mkdir(parents=True, exist_ok=True)
    return top


def make_patch(path: str, before: str | None, after: str | None, work: Path) -> str:
    """A unified diff made by GNU diff with a/ b/ labels (creations and deletions via /dev/null)."""
    work.mkdir(parents=True, exist_ok=True)
    a, b = work / "a.txt", work / "b.txt"
    a.write_text(before or "")
    b.write_text(after or "")
    proc = subprocess.run(
        [
            "diff",
            "-u",
            "--label",
            f"a/{path}" if before is not None else "/dev/null",
            "--label",
            f"b/{path}" if after is not None else "/dev/null",
            str(a),
            str(b),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    return proc.stdout


def make_repo(root: Path, rows: list[tuple[str, str]], *, pin: str = "0.29.0") -> Path:
    """A series repository: patches/manifest.yaml and one patch file per row."""
    repo = root / "repo"
    (repo / "patches").mkdir(parents=True)
    entries = []
    for name, text in rows:
        (repo / "patches" / f"{name}.patch").write_text(text)
        entries.append(
            f"  - name: {name}\n"
            f"    kind: fix\n"
            f"    what: test row {name}\n"
            f'    cut_against: "{pin}"\n'
            f"    retires_when: never\n"
            f"    patch: patches/{name}.patch\n"
        )
    (repo / "patches/manifest.yaml").write_text(
        f'format: 1\npin: "{pin}"\npackage: vllm\nsource: pypi:vllm=={pin}\n'
        "rows:\n" + "".join(entries)
    )
    return repo


def forked_series(tmp_path: Path, rows: list[tuple[str, str]], old: Path) -> tuple[Path, Path]:
    """A series repository of ``rows`` with one export point (qwen, branch qwen/0.29), and its fork
    imported on the release tree ``old`` (what the rebase tests start from)."""
    repo = make_repo(tmp_path, rows)
    manifest_path = repo / "patches/manifest.yaml"
    manifest_path.write_text(
        manifest_path.read_text().replace(
            "rows:\n", "export_points:\n  - name: qwen\n    branch: qwen/0.29\nrows:\n"
        )
    )
    fork = tmp_path / "fork"
    importing.import_series(
        load_manifest(repo), fork, tree=open_pristine(f"dir:{old}", version="0.29.0"), create=True
    )
    return repo, fork


def run_port(tmp_path: Path, old: Path, new: Path, repo: Path) -> PortReport:
    report, rebased = port(repo, "0.30.0", from_source=f"dir:{old}", to_source=f"dir:{new}")
    assert rebased is None
    return report


def gnu_offsets(tree: Path, patch_text: str) -> list[str]:
    """What GNU patch 2.7.6 says when applying at fuzz 0 (dry run)."""
    proc = subprocess.run(
        [require_gnu_patch(), "-p1", "--fuzz=0", "--forward", "--dry-run", "-d", str(tree)],
        input=patch_text,
        capture_output=True,
        text=True,
        check=False,
    )
    return re.findall(r"Hunk #\d+ succeeded at \d+ \(offset -?\d+ lines?\)\.", proc.stdout)


def test_exact_offset_and_drift(tmp_path: Path) -> None:
    old = release(tmp_path, "old", {"vllm/a.py": BASE, "vllm/b.py": BASE})
    # 0.30: a.py gained 5 lines at the top (the row lands at an offset); b.py changed far from the
    # row's hunk (the row applies exactly, but its file moved around it).
    new = release(
        tmp_path,
        "new",
        {
            "vllm/a.py": "".join(f"new {i}\n" for i in range(5)) + BASE,
            "vllm/b.py": lines_with({38: "line 38 changed upstream\n"}),
        },
    )
    pa = make_patch("vllm/a.py", BASE, lines_with({20: "line 20 ours\n"}), tmp_path / "w")
    pb = make_patch("vllm/b.py", BASE, lines_with({5: "line 5 ours\n"}), tmp_path / "w")
    repo = make_repo(tmp_path, [("row-a", pa), ("row-b", pb)])
    report = run_port(tmp_path, old, new, repo)
    a, b = report.rows
    assert (a.status, b.status) == ("offset", "exact")
    (hunk,) = a.in_sequence.hunks
    assert (hunk.line, hunk.offset) == (22, 5)
    # GNU patch reports the same line and offset on the same tree.
    assert gnu_offsets(new, pa) == ["Hunk #1 succeeded at 22 (offset 5 lines)."]
    assert [d.describe() for d in b.drift] == ["vllm/b.py changed (+1 -1)"]
    assert report.ok and report.counts["offset"] == 1 and report.counts["exact"] == 1


def test_upstream_partly_upstream_and_conflict_cause(tmp_path: Path) -> None:
    ours = lines_with({10: "line 10 ours\n", 30: "line 30 ours\n"})
    old = release(tmp_path, "old", {"vllm/up.py": BASE, "vllm/part.py": BASE, "vllm/c.py": BASE})
    new = release(
        tmp_path,
        "new",
        {
            # The whole row went upstream.
            "vllm/up.py": ours,
            # Only the first hunk went upstream.
            "vllm/part.py": lines_with({10: "line 10 ours\n"}),
            # Upstream rewrote a context line of the row's hunk.
            "vllm/c.py": lines_with({19: "line 19 rewritten upstream\n"}),
        },
    )
    w = tmp_path / "w"
    rows = [
        ("up", make_patch("vllm/up.py", BASE, ours, w)),
        ("part", make_patch("vllm/part.py", BASE, ours, w)),
        ("conf", make_patch("vllm/c.py", BASE, lines_with({20: "line 20 ours\n"}), w)),
    ]
    report = run_port(tmp_path, old, new, make_repo(tmp_path, rows))
    up, part, conf = report.rows
    assert up.status == "upstream"
    assert {h.status for h in up.in_sequence.hunks} == {"upstream"}
    # The pristine diff shows the upstream change that carries the row's lines.
    assert b"+line 10 ours\n" in up.in_sequence.hunks[0].pristine_diff

    assert part.status == "partly-upstream"
    assert [h.status for h in part.in_sequence.hunks] == ["upstream", "exact"]

    assert conf.status == "conflicts" and not report.ok
    (hunk,) = conf.in_sequence.hunks
    assert hunk.status == "conflict"
    assert "mismatches" not in hunk.to_json() and "near_line" not in hunk.to_json()  # one analysis
    assert hunk.cause == (
        "6 of 7 preimage lines found in the release at line 17 (the closest place); "
        "it has 1 other line there"
    )
    assert (hunk.aligned_line, hunk.aligned) == (
        17,
        b" line 17\n line 18\n-line 19\n+line 19 rewritten upstream\n"
        b" line 20\n line 21\n line 22\n line 23\n",
    )
    assert hunk.pristine_diff == (
        b"--- a/vllm/c.py\n+++ b/vllm/c.py\n@@ -16,7 +16,7 @@\n"
        b" line 16\n line 17\n line 18\n-line 19\n+line 19 rewritten upstream\n"
        b" line 20\n line 21\n line 22\n"
    )


def test_alone_versus_in_sequence(tmp_path: Path) -> None:
    """Row 2 edits a line row 1 adds: alone it conflicts, in sequence it applies; the report says so."""
    first = lines_with({12: "line 12 by row one\n"})
    second = lines_with({12: "line 12 by row two\n"}, first)
    old = release(tmp_path, "old", {"vllm/s.py": BASE})
    new = release(tmp_path, "new", {"vllm/s.py": BASE})
    w = tmp_path / "w"
    rows = [
        ("one", make_patch("vllm/s.py", BASE, first, w)),
        ("two", make_patch("vllm/s.py", first, second, w)),
    ]
    report = run_port(tmp_path, old, new, make_repo(tmp_path, rows))
    one, two = report.rows
    assert one.status == "exact" and not one.differs
    assert two.alone.status == "conflicts" and two.in_sequence.status == "exact" and two.differs


def test_created_file_the_release_already_has(tmp_path: Path) -> None:
    created = "def helper():\n    return 1\n"
    old = release(tmp_path, "old", {"vllm/a.py": BASE})
    new = release(
        tmp_path,
        "new",
        {"vllm/a.py": BASE, "vllm/same.py": created, "vllm/other.py": "upstream's own\n"},
    )
    w = tmp_path / "w"
    rows = [
        ("same", make_patch("vllm/same.py", None, created, w)),
        ("other", make_patch("vllm/other.py", None, created, w)),
    ]
    report = run_port(tmp_path, old, new, make_repo(tmp_path, rows))
    same, other = report.rows
    assert same.status == "upstream"
    assert other.status == "conflicts"
    (file,) = other.in_sequence.files
    assert file.error == (f"the row creates vllm/other.py, which dir:{new} adds with other content")
    assert [d.describe() for d in other.drift] == ["vllm/other.py added upstream"]


def test_file_removed_upstream_names_where_it_went(tmp_path: Path) -> None:
    old = release(tmp_path, "old", {"vllm/worker/gpu_worker.py": BASE})
    new = release(tmp_path, "new", {"vllm/v1/worker/gpu_worker.py": BASE})
    patch = make_patch("vllm/worker/gpu_worker.py", BASE, lines_with({3: "ours\n"}), tmp_path / "w")
    report = run_port(tmp_path, old, new, make_repo(tmp_path, [("moved", patch)]))
    (row,) = report.rows
    assert row.status == "conflicts"
    (file,) = row.in_sequence.files
    assert file.error == (
        f"vllm/worker/gpu_worker.py is removed upstream in dir:{new}; "
        "a file of that name is at vllm/v1/worker/gpu_worker.py"
    )


def test_module_file_row(tmp_path: Path) -> None:
    old = release(tmp_path, "old", {"vllm/a.py": BASE})
    new = release(tmp_path, "new", {"vllm/a.py": BASE, "vllm/kv/mod.py": "x = 1\n"})
    repo = make_repo(tmp_path, [])
    mods = repo / "kvarn/files/vllm/kv"
    mods.mkdir(parents=True)
    (mods / "mod.py").write_text("x = 1\n")
    (mods / "new.py").write_text("y = 2\n")
    manifest = repo / "patches/manifest.yaml"
    manifest.write_text(
        manifest.read_text().replace(
            "rows:\n",
            "rows:\n  - name: mods\n    kind: own\n    what: modules\n"
            '    cut_against: "0.29.0"\n    retires_when: never\n    files: kvarn/files\n',
        )
    )
    report = run_port(tmp_path, old, new, repo)
    (row,) = report.rows
    # One file is already there with the same bytes, the other still applies.
    assert row.status == "partly-upstream"
    assert [(f.path, f.status) for f in row.in_sequence.files] == [
        (b"vllm/kv/mod.py", "upstream"),
        (b"vllm/kv/new.py", "exact"),
    ]


def test_same_pin_and_bad_version(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, [])
    with pytest.raises(UsageError, match="is the pin itself"):
        port(repo, "0.29.0")
    with pytest.raises(UsageError, match="is not a release version"):
        port(repo, "latest")


def test_cli_json_markdown_and_exit_code(tmp_path: Path) -> None:
    old = release(tmp_path, "old", {"vllm/c.py": BASE})
    new = release(tmp_path, "new", {"vllm/c.py": lines_with({19: "line 19 upstream\n"})})
    patch = make_patch("vllm/c.py", BASE, lines_with({20: "line 20 ours\n"}), tmp_path / "w")
    repo = make_repo(tmp_path, [("conf", patch)])
    md = tmp_path / "port.md"
    base = [sys.executable, "-m", "hyperqwen_patches", "port", "--to", "0.30.0"]
    sources = ["--from-source", f"dir:{old}", "--source", f"dir:{new}", "--repo", str(repo)]
    proc = subprocess.run(
        [*base, *sources, "--json", "--markdown", str(md)], capture_output=True, text=True
    )
    assert proc.returncode == 1, proc.stderr  # a conflict is a finding
    top = json.loads(proc.stdout)
    assert top["ok"] is False and len(top["reports"]) == 1  # the same shape as with several --to
    doc = top["reports"][0]
    assert doc["rows"][0]["status"] == "conflicts" and doc["ok"] is False
    text = md.read_text()
    assert "| conf | conflicts |" in text
    assert "+line 19 upstream" in text
    table = subprocess.run([*base, *sources], capture_output=True, text=True)
    assert table.returncode == 1
    assert "conf" in table.stdout and "conflicts" in table.stdout
    assert "line 19 upstream" in table.stdout


def test_cli_matrix_of_releases(tmp_path: Path) -> None:
    old = release(tmp_path, "old", {"vllm/c.py": BASE})
    repo = make_repo(
        tmp_path,
        [("row", make_patch("vllm/c.py", BASE, lines_with({20: "ours\n"}), tmp_path / "w"))],
    )
    # Two "releases" as git checkouts: v0.30.0 moves the row's lines, v0.31.0 carries the row.
    vllm = tmp_path / "vllm-git"
    (vllm / "vllm").mkdir(parents=True)
    for tag, text in (("v0.30.0", "top\n" + BASE), ("v0.31.0", lines_with({20: "ours\n"}))):
        (vllm / "vllm/c.py").write_text(text)
        subprocess.run(["git", "init", "-q"], cwd=vllm, check=True)
        subprocess.run(["git", "add", "."], cwd=vllm, check=True)
        subprocess.run(["git", "commit", "-qm", tag], cwd=vllm, check=True)
        subprocess.run(["git", "tag", tag], cwd=vllm, check=True)
    md = tmp_path / "matrix.md"
    base = [sys.executable, "-m", "hyperqwen_patches", "port", "--repo", str(repo)]
    base += ["--from-source", f"dir:{old}", "--to", "0.30.0", "--to", "0.31.0"]
    proc = subprocess.run(
        [*base, "--source", f"git:{vllm}@v{{version}}", "--json", "--markdown", str(md)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    statuses = [r["rows"][0]["status"] for r in json.loads(proc.stdout)["reports"]]
    assert statuses == ["offset", "upstream"]
    text = md.read_text()
    assert "| # | row | 0.30.0 | 0.31.0 |" in text and "| 1 | row | offset | upstream |" in text
    assert "## vllm 0.29.0 → 0.30.0" in text and "### 1. row: already upstream" in text
    # The candidate's YAML for the manifest is in the document.
    assert '- row: row\n  pin: "0.31.0"' in text

    one_tree = subprocess.run([*base, "--source", f"dir:{old}"], capture_output=True, text=True)
    assert one_tree.returncode == 2
    assert "--source names one release's tree" in one_tree.stderr


def test_mismatch_shown_where_the_region_went_not_at_a_chance_match(tmp_path: Path) -> None:
    """Upstream re-indented the hunk's region; far below, three of its context lines happen to be
    repeated. The engine's best partial match anywhere is that decoy; the report must show the
    region where it went (the lines that no longer match), and say so."""
    base = "".join(f"line {i}\n" for i in range(1, 101))
    rewritten = base.splitlines(keepends=True)
    for i in range(46, 53):  # lines 47..53, except 49, re-indented
        if i != 48:
            rewritten[i] = "    " + rewritten[i]
    decoy = ["line 47\n", "line 48\n", "unrelated\n", "line 50\n"]
    new_text = "".join(rewritten[:90] + decoy + rewritten[90:])
    old = release(tmp_path, "old", {"vllm/r.py": base})
    new = release(tmp_path, "new", {"vllm/r.py": new_text})
    ours = base.replace("line 50\n", "line 50 ours\n")
    patch = make_patch("vllm/r.py", base, ours, tmp_path / "w")
    report = run_port(tmp_path, old, new, make_repo(tmp_path, [("row", patch)]))
    (hunk,) = report.rows[0].in_sequence.hunks
    assert hunk.status == "conflict"
    assert hunk.aligned_line == 47
    assert hunk.cause == (
        "1 of 7 preimage lines found in the release at line 47 (where the region went "
        "upstream); it has 6 other lines there"
    )
    assert b"-line 47\n" in hunk.aligned and b"+    line 47\n" in hunk.aligned


def test_a_context_line_deleted_upstream_shows_as_one_line(tmp_path: Path) -> None:
    """Upstream deleted one context line of the hunk: the aligned view shows that one line gone,
    not every following line shifted (what a line-by-line comparison would show)."""
    new_text = "".join(line for line in BASE.splitlines(keepends=True) if line != "line 18\n")
    old = release(tmp_path, "old", {"vllm/d.py": BASE})
    new = release(tmp_path, "new", {"vllm/d.py": new_text})
    patch = make_patch("vllm/d.py", BASE, lines_with({20: "line 20 ours\n"}), tmp_path / "w")
    report = run_port(tmp_path, old, new, make_repo(tmp_path, [("row", patch)]))
    (hunk,) = report.rows[0].in_sequence.hunks
    assert hunk.status == "conflict"
    assert hunk.aligned.count(b"\n-") + hunk.aligned.startswith(b"-") == 1
    assert b"-line 18\n" in hunk.aligned and b"\n+" not in hunk.aligned
    assert hunk.cause == "6 of 7 preimage lines found in the release at line 17 (the closest place)"


def test_a_hunk_that_also_matches_elsewhere_is_reported(tmp_path: Path) -> None:
    """The new release has a second copy of the hunk's preimage: the hunk applies at the nearer copy
    (as GNU patch does), and the report names the other place."""
    block = "".join(f"line {i}\n" for i in range(17, 24))
    new_text = BASE + "# a copy below\n" + block
    old = release(tmp_path, "old", {"vllm/dup.py": BASE})
    new = release(tmp_path, "new", {"vllm/dup.py": new_text})
    patch = make_patch("vllm/dup.py", BASE, lines_with({20: "line 20 ours\n"}), tmp_path / "w")
    repo = make_repo(tmp_path, [("row", patch)])
    report = run_port(tmp_path, old, new, repo)
    (hunk,) = report.rows[0].in_sequence.hunks
    assert (hunk.status, hunk.line, hunk.other_matches) == ("exact", 17, (42,))
    assert gnu_offsets(new, patch) == []  # GNU patch takes line 17 silently
    assert "its preimage also matches at line(s) 42" in render_markdown(report)


def test_a_failed_hunk_carries_gnu_patchs_failed_at_line(tmp_path: Path) -> None:
    """``reported_line`` is GNU's "Hunk #N FAILED at L": the stated line moved by what the file's
    earlier hunks added (here 3 lines), checked against GNU patch itself."""
    old = release(tmp_path, "old", {"vllm/c.py": BASE})
    new_text = lines_with({30: "line 30 changed upstream\n"})
    new = release(tmp_path, "new", {"vllm/c.py": new_text})
    ours = lines_with({5: "line 5\nadded a\nadded b\nadded c\n", 30: "line 30 ours\n"})
    patch = make_patch("vllm/c.py", BASE, ours, tmp_path / "w")
    repo = make_repo(tmp_path, [("two", patch)])
    report = run_port(tmp_path, old, new, repo)
    failed = [h for h in report.rows[0].in_sequence.files[0].hunks if h.status == "conflict"]
    assert len(failed) == 1
    gnu = subprocess.run(
        [require_gnu_patch(), "-p1", "--fuzz=0", "--forward", "--dry-run", "-d", str(new)],
        input=patch, capture_output=True, text=True, check=False,
    )  # fmt: skip
    (said,) = re.findall(r"Hunk #2 FAILED at (\d+)\.", gnu.stdout)
    assert failed[0].reported_line == int(said) == failed[0].stated_line + 3
    assert failed[0].to_json()["reported_line"] == int(said)


def test_a_conflict_by_cascade_names_the_row_it_comes_from(tmp_path: Path) -> None:
    """Row a clashes with the new release; row b only fails because its context is a's added line
    (in sequence a was not carried; alone, b builds on a); row c clashes on its own. GNU patch, run
    in sequence on the new release, fails the same hunks."""
    old = release(tmp_path, "old", {"vllm/c.py": BASE, "vllm/d.py": BASE})
    new = release(
        tmp_path,
        "new",
        {
            "vllm/c.py": lines_with({20: "line 20 upstream\n"}),
            "vllm/d.py": lines_with({5: "line 5 upstream\n"}),
        },
    )
    after_a = lines_with({20: "line 20 ours\n"})
    a = make_patch("vllm/c.py", BASE, after_a, tmp_path / "wa")
    b = make_patch(
        "vllm/c.py", after_a, lines_with({22: "line 22 ours\n"}, after_a), tmp_path / "wb"
    )
    c = make_patch("vllm/d.py", BASE, lines_with({5: "line 5 ours\n"}), tmp_path / "wc")
    repo = make_repo(tmp_path, [("a", a), ("b", b), ("c", c)])
    report = run_port(tmp_path, old, new, repo)
    rows = {r.name: r for r in report.rows}
    assert [rows[n].status for n in "abc"] == ["conflicts"] * 3
    (hb,) = [h for h in rows["b"].in_sequence.hunks if h.status == "conflict"]
    assert hb.caused_by == ("a",) and hb.cause.startswith("conflict by cascade from a")
    assert [h.caused_by for h in rows["b"].alone.hunks if h.status == "conflict"] == [("a",)]
    assert rows["b"].cascade == ("a",) and rows["a"].cascade == () and rows["c"].cascade == ()
    assert all(not h.caused_by for h in rows["a"].in_sequence.hunks + rows["c"].in_sequence.hunks)
    assert report.counts["conflicts_by_cascade"] == 1
    doc = report.to_json()
    assert [r["cascade_from"] for r in doc["rows"]] == [[], ["a"], []]
    work = tmp_path / "gnu"
    import shutil

    shutil.copytree(new, work)
    failed = []
    for name, text in (("a", a), ("b", b), ("c", c)):
        proc = subprocess.run(
            [require_gnu_patch(), "-p1", "--fuzz=0", "--forward", "-s", "-d", str(work)],
            input=text, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode:
            failed.append(name)
    assert failed == ["a", "b", "c"]


GATED_OLD = """import os


def setup(cfg):
    size = cfg.size
    name = cfg.name
    return size, name
"""


def test_a_row_taken_upstream_in_changed_form_is_named_with_its_evidence(tmp_path: Path) -> None:
    """The row adds two lines; the release took them re-indented under a new `if` (gated for another
    platform), so neither the row nor its reverse applies. port names the hunk upstream in changed
    form, gives the release lines that carry it, and counts the row apart for review; GNU patch
    fails the hunk as port does."""
    ours = GATED_OLD.replace(
        "    name = cfg.name\n",
        "    name = cfg.name\n    if cfg.tp > 1:\n        size = size // cfg.tp\n",
    )
    upstream = GATED_OLD.replace(
        "    name = cfg.name\n",
        "    name = cfg.name\n    if os.name != 'nt':\n        if cfg.tp > 1:\n"
        "            size = size // cfg.tp\n",
    )
    old = release(tmp_path, "old", {"vllm/setup.py": GATED_OLD})
    new = release(tmp_path, "new", {"vllm/setup.py": upstream})
    patch = make_patch("vllm/setup.py", GATED_OLD, ours, tmp_path / "w")
    plain = make_patch(
        "vllm/setup.py", GATED_OLD, GATED_OLD.replace("import os", "import os, re"), tmp_path / "w2"
    )
    repo = make_repo(tmp_path, [("tp-split", patch), ("imports", plain)])
    report = run_port(tmp_path, old, new, repo)
    row, other = report.rows
    assert row.status == "conflicts" and other.status == "exact"
    (hunk,) = row.in_sequence.hunks
    assert hunk.status == "conflict"
    assert [n for n, _ in hunk.upstream_evidence] == [8, 9]  # under the new `if` at line 7
    assert hunk.upstream_evidence[1][1] == b"            size = size // cfg.tp"
    assert "upstream in changed form" in hunk.cause
    assert row.upstream_changed_form and not other.upstream_changed_form
    doc = row.to_json()
    assert doc["upstream_form"] == "changed"
    assert doc["in_sequence"]["files"][0]["hunks"][0]["evidence"][0] == {
        "line": 8,
        "text": "        if cfg.tp > 1:",
    }
    assert report.counts["upstream_in_changed_form"] == 1
    assert "1 of the conflicts upstream in changed form" in count_line(report)
    assert gnu_fails(new, patch)


def test_a_conflict_whose_lines_are_not_upstream_has_no_changed_form(tmp_path: Path) -> None:
    """Only one of the two added lines is in the release: no claim."""
    ours = GATED_OLD.replace(
        "    name = cfg.name\n",
        "    name = cfg.name\n    if cfg.tp > 1:\n        size = size // cfg.tp\n",
    )
    upstream = GATED_OLD.replace(
        "    name = cfg.name\n", "    name = cfg.label\n    if cfg.tp > 1:\n"
    )
    old = release(tmp_path, "old", {"vllm/setup.py": GATED_OLD})
    new = release(tmp_path, "new", {"vllm/setup.py": upstream})
    repo = make_repo(
        tmp_path, [("tp-split", make_patch("vllm/setup.py", GATED_OLD, ours, tmp_path / "w"))]
    )
    (row,) = run_port(tmp_path, old, new, repo).rows
    (hunk,) = row.in_sequence.hunks
    assert hunk.status == "conflict" and hunk.upstream_evidence == ()
    assert not row.upstream_changed_form and row.to_json()["upstream_form"] is None


def gnu_fails(tree: Path, patch_text: str) -> bool:
    proc = subprocess.run(
        [require_gnu_patch(), "-p1", "--fuzz=0", "--forward", "--dry-run", "-d", str(tree)],
        input=patch_text, capture_output=True, text=True, check=False,
    )  # fmt: skip
    return proc.returncode == 1 and "FAILED" in proc.stdout

"""What ``status``, ``apply --check-applied``, ``apply --upto`` and ``unapply`` say of a tree, checked
against the tree itself: real directories, real git repositories, GNU patch 2.7.6 as the oracle.

Issue #39: a tree carrying an earlier revision of the series (a dropped row, a replaced row, a foreign
edit) was called "complete" or "pristine"; ``--upto`` could not take later rows out; a deletion of a
file with other content was "already applied" where GNU patch exits 1.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import require_gnu_patch


def hqp(
    *args: str | Path, cwd: Path | None = None, cache: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "400"}
    if cache is not None:
        env["HQP_CACHE"] = str(cache)
    return subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
        env=env,
    )


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def gnu(patch_file: Path, directory: Path, *extra: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [
            require_gnu_patch(),
            "-p1",
            "--fuzz",
            "0",
            "--forward",
            "--no-backup-if-mismatch",
            "-r",
            "-",
            "-i",
            str(patch_file),
            *extra,
        ],
        cwd=directory,
        capture_output=True,
        check=False,
    )


# --- a deletion of a file that holds other content ------------------------------------------------

DELETE = (
    b"diff --git a/vllm/old.py b/vllm/old.py\ndeleted file mode 100644\n"
    b"--- a/vllm/old.py\n+++ /dev/null\n@@ -1,3 +0,0 @@\n-one\n-two\n-three\n"
)


@pytest.mark.parametrize(
    "content", [b"other\ncontent\n", b"one\ntwo\n", b"one\ntwo\nthree\nfour\n", b""]
)
def test_deleting_a_file_with_other_content_fails_as_gnu_patch_does(
    tmp_path: Path, content: bytes
) -> None:
    patch_file = tmp_path / "d.patch"
    patch_file.write_bytes(DELETE)
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for root in (ours, theirs):
        (root / "vllm").mkdir(parents=True)
        (root / "vllm/old.py").write_bytes(content)
    before = snapshot(ours)
    proc = hqp("apply", ours, "--patch", patch_file)
    oracle = gnu(patch_file, theirs)
    assert (proc.returncode, oracle.returncode) == (1, 1), proc.stdout + proc.stderr
    assert "not deleting vllm/old.py" in proc.stdout
    # All or nothing: the file is kept as it was (GNU patch may leave the lines it could not delete).
    assert snapshot(ours) == before
    # --check-applied agrees with apply: the deletion is not there.
    checked = hqp("apply", ours, "--patch", patch_file, "--check-applied")
    assert checked.returncode == 1 and "does not carry 1 of 1" in checked.stderr


def test_a_deletion_applies_and_re_applies(tmp_path: Path) -> None:
    patch_file = tmp_path / "d.patch"
    patch_file.write_bytes(DELETE)
    (tmp_path / "t/vllm").mkdir(parents=True)
    (tmp_path / "t/vllm/old.py").write_bytes(b"one\ntwo\nthree\n")
    (tmp_path / "t/vllm/keep.py").write_bytes(b"x\n")
    assert hqp("apply", tmp_path / "t", "--patch", patch_file).returncode == 0
    assert not (tmp_path / "t/vllm/old.py").exists()
    again = hqp("apply", tmp_path / "t", "--patch", patch_file)
    assert again.returncode == 0 and "already carries all 1" in again.stdout


# --- a generated series, its earlier revision, and trees patched by GNU patch --------------------


def lines(name: str, n: int = 40) -> list[str]:
    return [f"{name}_{i} = {i}\n" for i in range(1, n + 1)]


def edit(content: list[str], changes: dict[int, str]) -> list[str]:
    """1-based line -> new text (a text with several lines replaces one line by them)."""
    out = list(content)
    for line in sorted(changes, reverse=True):
        out[line - 1 : line] = changes[line].splitlines(keepends=True)
    return out


def unified(path: str, before: list[str], after: list[str]) -> str:
    diff = difflib.unified_diff(before, after, f"a/{path}", f"b/{path}", n=3)
    return f"diff --git a/{path} b/{path}\n" + "".join(diff)


RELEASE = {"vllm/a.py": lines("a"), "vllm/b.py": lines("b"), "vllm/c.py": lines("c")}


def revision(rows: list[tuple[str, dict[str, dict[int, str]]]]) -> list[tuple[str, str]]:
    """Rows as (name, patch text), each cut against the release plus the rows before it."""
    state = {k: list(v) for k, v in RELEASE.items()}
    out = []
    for name, changes in rows:
        text = ""
        for path, change in changes.items():
            after = edit(state[path], change)
            text += unified(path, state[path], after)
            state[path] = after
        out.append((name, text))
    return out


BASE = ("base-knob", {"vllm/a.py": {5: "a_5 = 5\nKNOB = 1\n"}})
# Layered: it rewrites the line base-knob added.
LAYER = ("layer", {"vllm/a.py": {6: "KNOB = 2\n"}, "vllm/b.py": {10: "b_10 = 100\n"}})
REPLACEMENT = ("replacement", {"vllm/c.py": {10: "c_10 = 1000\n"}})
CURRENT = revision([BASE, LAYER, REPLACEMENT])
# The earlier revision: layer also changed b.py line 30 (a replaced row: its current hunks are all
# still there), and a row later dropped changed c.py line 30 (the replacement touches c.py too).
EARLIER_LAYER = (
    "layer",
    {"vllm/a.py": {6: "KNOB = 2\n"}, "vllm/b.py": {10: "b_10 = 100\n", 30: "b_30 = 3\n"}},
)
DROPPED = ("dropped", {"vllm/c.py": {30: "c_30 = -30\n"}})


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A repository whose manifest names the release as a directory (``dir:``)."""
    release = tmp_path / "release"
    for path, content in RELEASE.items():
        (release / path).parent.mkdir(parents=True, exist_ok=True)
        (release / path).write_text("".join(content))
    repo = tmp_path / "repo"
    (repo / "patches").mkdir(parents=True)
    rows = []
    for i, (name, text) in enumerate(CURRENT, 1):
        (repo / f"patches/{i:04d}-{name}.patch").write_text(text)
        rows.append(
            f"  - name: {name}\n    patch: patches/{i:04d}-{name}.patch\n    kind: local\n"
            f"    what: test row {name}\n    cut_against: '0.29.0'\n    retires_when: never\n"
        )
    (repo / "patches/manifest.yaml").write_text(
        "format: 1\npin: '0.29.0'\npackage: vllm\n"
        f"source: dir:{release}\npaths: root\nrows:\n" + "".join(rows)
    )
    return repo


def patched(tmp_path: Path, name: str, rows: list[tuple[str, str]]) -> Path:
    """The release with ``rows`` applied by GNU patch, one after the other."""
    site = tmp_path / name
    shutil.copytree(tmp_path / "release", site)
    for row, text in rows:
        patch_file = tmp_path / f"{name}-{row}.patch"
        patch_file.write_text(text)
        proc = gnu(patch_file, site)
        assert proc.returncode == 0, proc.stdout
    return site


def earlier(tmp_path: Path, case: str) -> tuple[Path, str]:
    """A tree carrying an earlier revision of the series (or a foreign edit), then ``apply``-ed to
    the current one, and the one file that carries something else."""
    if case == "dropped row":
        site = patched(tmp_path, "site", revision([BASE, LAYER, DROPPED]))
        return site, "vllm/c.py"
    if case == "replaced row":
        site = patched(tmp_path, "site", revision([BASE, EARLIER_LAYER]))
        return site, "vllm/b.py"
    site = patched(tmp_path, "site", revision([BASE, LAYER]))
    a = site / "vllm/a.py"
    a.write_text(a.read_text().replace("a_35 = 35\n", "a_35 = 'by hand'\n"))
    return site, "vllm/a.py"


ROWS_TOUCHING = {
    "vllm/a.py": ["base-knob", "layer"],
    "vllm/b.py": ["layer"],
    "vllm/c.py": ["replacement"],
}


@pytest.mark.parametrize("case", ["dropped row", "replaced row", "foreign edit"])
def test_an_earlier_revision_is_named_file_by_file(
    project: Path, tmp_path: Path, case: str
) -> None:
    site, wrong = earlier(tmp_path, case)
    cache = tmp_path / "cache"
    # The reverse pass alone would call this tree "2 of 3"; the release says otherwise.
    proc = hqp("status", site, "--repo", project, "--json", cache=cache)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["state"] == "inconsistent" and doc["carried"] == 2
    assert doc["divergent"] == [{"path": wrong, "rows": ROWS_TOUCHING[wrong]}]
    proc = hqp("status", site, "--repo", project, cache=cache)
    assert f"{wrong} carries an earlier or foreign change" in proc.stderr
    # apply adds the third row (it applies); the tree is still not the release plus the series.
    assert hqp("apply", site, "--repo", project, cache=cache).returncode == 0
    for args in (("status",), ("apply", "--check-applied")):
        proc = hqp(*args, site, "--repo", project, cache=cache)
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        assert f"{wrong} carries an earlier or foreign change" in proc.stderr
        assert "complete" not in proc.stdout and "carries all" not in proc.stdout
    checked = json.loads(
        hqp("apply", site, "--repo", project, "--check-applied", "--json", cache=cache).stdout
    )
    assert checked["ok"] is False and [d["path"] for d in checked["divergent"]] == [wrong]
    # unapply refuses, names the file, writes nothing: taking the rows out would not give the release.
    before = snapshot(site)
    proc = hqp("unapply", site, "--repo", project, cache=cache)
    assert proc.returncode == 1 and wrong in proc.stderr and "nothing was written" in proc.stderr
    assert snapshot(site) == before


def test_a_clean_tree_with_bytecode_beside_it_is_complete_then_pristine(
    project: Path, tmp_path: Path
) -> None:
    site = patched(tmp_path, "site", CURRENT)
    # site-packages carries compiled files beside the sources; they are not the series' business.
    (site / "vllm/__pycache__").mkdir()
    (site / "vllm/__pycache__/a.cpython-312.pyc").write_bytes(b"\x00\x01 not the source")
    cache = tmp_path / "cache"
    doc = json.loads(hqp("status", site, "--repo", project, "--json", cache=cache).stdout)
    assert (doc["state"], doc["carried"], doc["divergent"]) == ("complete", 3, [])
    assert doc["compared_with_release"] is True and doc["not_compared"] is None
    assert hqp("apply", site, "--repo", project, "--check-applied", cache=cache).returncode == 0
    proc = hqp("unapply", site, "--repo", project, cache=cache)
    assert proc.returncode == 0, proc.stderr
    assert snapshot(site) == {
        **snapshot(tmp_path / "release"),
        "vllm/__pycache__/a.cpython-312.pyc": b"\x00\x01 not the source",
    }
    doc = json.loads(hqp("status", site, "--repo", project, "--json", cache=cache).stdout)
    assert (doc["state"], doc["divergent"]) == ("pristine", [])
    # The expected states were computed once and kept: one entry in the result cache.
    assert len(list((cache / "results/expected-states").glob("*.json"))) == 1


def test_a_release_that_cannot_be_read_is_said_not_hidden(project: Path, tmp_path: Path) -> None:
    site = patched(tmp_path, "site", CURRENT)
    shutil.rmtree(tmp_path / "release")
    proc = hqp("status", site, "--repo", project, "--json", cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["compared_with_release"] is False and "could not be read" in doc["not_compared"]
    assert "not compared with the release" in proc.stderr


# --- apply --upto ROW and unapply --to ROW take later rows out (quilt's pop ROW) -----------------


def gnu_popped(tmp_path: Path, name: str, keep: int) -> Path:
    """The oracle: GNU patch applies the whole series, then ``patch -R`` takes rows n..keep+1 out,
    last first."""
    site = patched(tmp_path, name, CURRENT)
    for row, _text in reversed(CURRENT[keep:]):
        patch_file = tmp_path / f"{name}-{row}.patch"
        proc = gnu(patch_file, site, "-R")
        assert proc.returncode == 0, proc.stdout
    return site


@pytest.mark.parametrize(
    ("command", "row", "keep"),
    [
        ("apply --upto", "1", 1),
        ("apply --upto", "layer", 2),
        ("apply --upto", "0001-base-knob.patch", 1),
        ("unapply --to", "base-knob", 1),
        ("unapply --to", "patches/0002-layer.patch", 2),
        ("unapply --to", "3", 3),
    ],
)
def test_later_rows_come_out_as_gnu_patch_R_takes_them_out(
    project: Path, tmp_path: Path, command: str, row: str, keep: int
) -> None:
    site = patched(tmp_path, "site", CURRENT)
    verb, option = command.split()
    proc = hqp(verb, site, "--repo", project, option, row, cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert snapshot(site) == snapshot(gnu_popped(tmp_path, "oracle", keep))
    doc = json.loads(hqp("status", site, "--repo", project, "--json").stdout)
    assert (doc["carried"], doc["divergent"]) == (keep, [])
    # Asked again, nothing moves; apply alone brings the rest back.
    again = hqp(verb, site, "--repo", project, option, row)
    assert again.returncode == 0 and snapshot(site) == snapshot(tmp_path / "oracle")
    assert hqp("apply", site, "--repo", project).returncode == 0
    assert snapshot(site) == snapshot(patched(tmp_path, "full", CURRENT))


def test_upto_from_a_shorter_tree_pushes(project: Path, tmp_path: Path) -> None:
    site = patched(tmp_path, "site", CURRENT[:1])
    proc = hqp("apply", site, "--repo", project, "--upto", "0002-layer.patch")
    assert proc.returncode == 0, proc.stderr
    assert snapshot(site) == snapshot(patched(tmp_path, "oracle", CURRENT[:2]))


def test_taking_rows_out_is_all_or_nothing(project: Path, tmp_path: Path) -> None:
    """A later row whose lines were edited by hand does not come out: nothing is written."""
    site = patched(tmp_path, "site", CURRENT)
    b = site / "vllm/b.py"
    b.write_text(b.read_text().replace("b_10 = 100\n", "b_10 = 'by hand'\n"))
    before = snapshot(site)
    for verb, option in (("apply", "--upto"), ("unapply", "--to")):
        proc = hqp(verb, site, "--repo", project, option, "base-knob")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "nothing was written" in proc.stderr and "layer" in proc.stderr
        assert snapshot(site) == before


@pytest.mark.parametrize("row", ["0", "4", "no-such-row", "patches/0009-x.patch"])
def test_a_row_that_is_not_in_the_series_is_a_usage_error(
    project: Path, tmp_path: Path, row: str
) -> None:
    site = patched(tmp_path, "site", CURRENT)
    before = snapshot(site)
    for verb, option in (("apply", "--upto"), ("unapply", "--to")):
        proc = hqp(verb, site, "--repo", project, option, row)
        assert proc.returncode == 2 and option in proc.stderr, proc.stderr
    assert snapshot(site) == before


# --- messages ----------------------------------------------------------------------------------------


def test_a_re_apply_counts_its_hunks_as_already_applied_not_exact(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm/a.py").write_text("".join(RELEASE["vllm/a.py"]))
    patch_file = tmp_path / "p.patch"
    patch_file.write_text(revision([BASE])[0][1])
    first = json.loads(hqp("apply", site, "--patch", patch_file, "--json").stdout)
    assert first["totals"]["hunks"] == {
        "exact": 1,
        "offset": 0,
        "failed": 0,
        "ambiguous": 0,
        "already_applied": 0,
    }
    again = hqp("apply", site, "--patch", patch_file, "--json")
    assert again.returncode == 0
    assert json.loads(again.stdout)["totals"]["hunks"] == {
        "exact": 0,
        "offset": 0,
        "failed": 0,
        "ambiguous": 0,
        "already_applied": 1,
    }
    text = hqp("apply", site, "--patch", patch_file).stdout
    assert "already-applied" in text and "already carries" in text and "exact" not in text


def test_the_new_documents_follow_their_schemas(project: Path, tmp_path: Path) -> None:
    """status, --check-applied and unapply on a tree that carries something else, and apply --upto
    taking rows out: each --json document against its schema (the schemas stay in sync)."""
    import jsonschema

    schemas = Path(__file__).parents[1] / "src/hyperqwen_patches/schemas"

    def valid(name: str, *args: str | Path, code: int) -> dict:
        proc = hqp(*args, "--json", cache=tmp_path / "cache")
        assert proc.returncode == code, proc.stderr
        doc = json.loads(proc.stdout)
        schema = json.loads((schemas / f"{name}.schema.json").read_text())
        jsonschema.Draft202012Validator(schema).validate(doc)
        return doc

    site, wrong = earlier(tmp_path, "dropped row")
    assert valid("status", "status", site, "--repo", project, code=1)["divergent"]
    checked = valid(
        "apply-check-applied", "apply", site, "--repo", project, "--check-applied", code=1
    )
    # The third row is missing; at rows 1-2 the tree is still compared, and c.py named.
    assert [d["path"] for d in checked["divergent"]] == [wrong]
    refused = valid("unapply", "unapply", site, "--repo", project, code=1)
    assert refused["ok"] is False and refused["divergent"][0]["path"] == wrong
    clean = patched(tmp_path, "clean", CURRENT)
    popped = valid("unapply", "apply", clean, "--repo", project, "--upto", "1", code=0)
    assert (popped["taken_out"], popped["kept"]) == (["replacement", "layer"], 1)


def test_upto_names_patch_files_given_with_patch(tmp_path: Path) -> None:
    """Without a manifest the rows are the --patch files: by number, path or file name."""
    (tmp_path / "release").mkdir()
    for path, content in RELEASE.items():
        (tmp_path / "release" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "release" / path).write_text("".join(content))
    files = []
    for i, (name, text) in enumerate(CURRENT, 1):
        files.append(tmp_path / f"{i:04d}-{name}.patch")
        files[-1].write_text(text)
    args = [x for f in files for x in ("--patch", f)]
    site = patched(tmp_path, "site", CURRENT)
    assert hqp("apply", site, *args, "--upto", "0002-layer.patch").returncode == 0
    assert snapshot(site) == snapshot(patched(tmp_path, "two", CURRENT[:2]))
    assert hqp("apply", site, *args, "--upto", "1").returncode == 0
    assert snapshot(site) == snapshot(patched(tmp_path, "one", CURRENT[:1]))
    assert hqp("apply", site, *args, "--upto", str(files[2])).returncode == 0
    assert snapshot(site) == snapshot(patched(tmp_path, "all", CURRENT))

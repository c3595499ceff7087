"""``port`` and the retirement check on the real vLLM 0.29.0 and 0.30.0 wheels from PyPI.

The wheels (~300 MB each) are fetched once into the shared cache ($HQP_CACHE) and read from there; the
rows are cut from the wheels themselves so the expected outcome is known without trusting the tool:

- ``backport``: one change hunk of the real 0.29.0 -> 0.30.0 diff of ``vllm/envs.py``: 0.30.0 carries it,
  so it must be ``upstream``, and a retirement of it at 0.30.0 must verify;
- ``collide``: an edit of a 0.29.0 line that 0.30.0 replaced: a conflict whose cause, the upstream
  change, must be in the pristine diff shown;
- ``steady``: an edit of a file both releases ship byte for byte: ``exact``.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from hyperqwen_patches import records
from hyperqwen_patches.checks.pipeline import run_check
from hyperqwen_patches.port.retirements import check_retirements
from hyperqwen_patches.port.run import port
from hyperqwen_patches.port.triage import classify_rows, rows_from_manifest
from hyperqwen_patches.series.manifest import load_manifest
from hyperqwen_patches.sources.pristine import open_pristine
from tests.conftest import REPO_ROOT, require_gnu_patch
from tests.test_port import make_patch, make_repo

pytestmark = [pytest.mark.network, pytest.mark.slow]

ENVS = b"vllm/envs.py"


@pytest.fixture(scope="module")
def wheels() -> tuple[dict[bytes, str], dict[bytes, str]]:
    old = open_pristine("pypi:vllm==0.29.0", version="0.29.0")
    new = open_pristine("pypi:vllm==0.30.0", version="0.30.0")
    try:
        paths = (ENVS, b"vllm/version.py")
        olds = {p: (old.read(p) or b"").decode() for p in paths}
        news = {p: (new.read(p) or b"").decode() for p in paths}
    finally:
        old.close()
        new.close()
    return olds, news


def test_port_and_retire_on_real_wheels(
    tmp_path: Path, wheels: tuple[dict[bytes, str], dict[bytes, str]]
) -> None:
    olds, news = wheels
    assert olds[b"vllm/version.py"] == news[b"vllm/version.py"]
    a = olds[ENVS].splitlines(keepends=True)
    b = news[ENVS].splitlines(keepends=True)
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    # The first upstream replacement: its old lines are what 0.30.0 no longer has.
    _, i1, i2, j1, j2 = next(op for op in ops if op[0] == "replace")
    backport = "".join(a[:i1] + b[j1:j2] + a[i2:])
    collide = "".join([*a[:i1], "# our edit of a line 0.30.0 replaced\n", *a[i1 + 1 :]])
    steady = olds[b"vllm/version.py"] + "# ours\n"
    w = tmp_path / "w"
    rows = [
        ("backport", make_patch("vllm/envs.py", olds[ENVS], backport, w)),
        ("collide", make_patch("vllm/envs.py", olds[ENVS], collide, w)),
        ("steady", make_patch("vllm/version.py", olds[b"vllm/version.py"], steady, w)),
    ]
    repo = make_repo(tmp_path, rows)

    report, _ = port(repo, "0.30.0")
    by_name = {r.name: r for r in report.rows}
    assert report.to_label == "pypi:vllm==0.30.0"
    assert by_name["backport"].status == "upstream"
    assert by_name["steady"].status == "exact"
    # In sequence, collide meets the tree as the release has it (backport contributed nothing).
    collide_row = by_name["collide"]
    assert collide_row.status == "conflicts" and collide_row.alone.status == "conflicts"
    (hunk,) = collide_row.in_sequence.hunks
    assert b"-" + a[i1].encode() in hunk.aligned.splitlines(keepends=True)
    # The cause is on screen: the upstream replacement is in the pristine diff shown.
    shown = hunk.pristine_diff.decode()
    assert "".join(f"-{line}" for line in a[i1:i2]) in shown
    assert "".join(f"+{line}" for line in b[j1:j2]) in shown
    (drift,) = by_name["steady"].drift
    assert drift.status == "unchanged"
    (candidate,) = report.retirement_candidates
    assert (candidate.row, candidate.pin, candidate.hunk) == ("backport", "0.30.0", None)

    # Retire it at 0.30.0 as the candidate says: check verifies it on the 0.30.0 wheel; the same
    # retirement claimed at 0.29.0 (which does not carry it) is refused.
    manifest = repo / "patches/manifest.yaml"
    text = manifest.read_text().replace(
        "    patch: patches/backport.patch\n",
        "    patch: patches/backport.patch\n    skip: carried by vllm 0.30.0\n",
    )
    only = (check_retirements,)
    for pin, expected in (("0.30.0", []), ("0.29.0", ["error"])):
        # The candidate's own YAML, as the report prints it for the manifest.
        entry = records.replace(candidate, pin=pin).to_yaml()
        manifest.write_text(text + "retirements:\n" + textwrap.indent(entry, "  "))
        result = run_check(repo, pipeline=only)
        assert [f.severity for f in result.findings] == expected, result.findings


def test_a_version_not_on_pypi_is_one_clear_error(tmp_path: Path) -> None:
    """pip is asked for real; nothing is left in the cache for the missing release."""
    import subprocess
    import sys

    repo = make_repo(tmp_path, [])
    proc = subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", "port", "--to", "0.29.99", "--repo", str(repo)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "400"},
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    # Off a terminal the download's start and end lines come first (a CI log); then the one error.
    said = proc.stderr.splitlines()
    assert said[0] == "downloading pypi:vllm==0.29.99 ..."
    assert said[1].startswith("downloading pypi:vllm==0.29.99: failed after ")
    errors = [line for line in said if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("error: vllm==0.29.99 has no wheel on the package index")
    cache = Path(os.environ["HQP_CACHE"]) / "pypi"
    assert not any(p.name.startswith("vllm-0.29.99") for p in cache.iterdir())


_GNU_HUNK = re.compile(
    r"^Hunk #(\d+) (?:succeeded at (\d+) \(offset (-?\d+) lines?\)|FAILED at \d+)\.$"
)


def gnu_verdicts(
    tree: Path, patch_file: Path, hunks: dict[str, int]
) -> list[tuple[str, int, str, int | None]]:
    """(file, hunk, "offset"/"failed", line) as GNU patch 2.7.6 reports them (dry run, fuzz 0).

    A file GNU patch finds reversed (``--forward`` skips it) counts as every hunk not applying,
    which is what port's forward attempt says before it looks at the reverse."""
    proc = subprocess.run(
        [
            require_gnu_patch(),
            *("-p1", "--fuzz=0", "--forward", "--dry-run", "--batch"),
            *("-d", str(tree), "-i", str(patch_file)),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    out: list[tuple[str, int, str, int | None]] = []
    current = ""
    for line in proc.stdout.splitlines():
        if line.startswith("checking file "):
            current = line[len("checking file ") :]
        if line.startswith("Reversed (or previously applied) patch detected!"):
            out += [(current, n, "failed", None) for n in range(1, hunks[current] + 1)]
        m = _GNU_HUNK.match(line)
        if m:
            failed = m[2] is None
            out.append(
                (
                    current,
                    int(m[1]),
                    "failed" if failed else "offset",
                    None if failed else int(m[2]),
                )
            )
    return out


@pytest.mark.parametrize("version", ["0.30.0", "0.33.0"])
def test_shipped_series_agrees_with_gnu_patch(tmp_path: Path, version: str) -> None:
    """Every patch row of the shipped series, alone on the real release: the hunks port says apply
    at an offset, and the ones it says conflict, are exactly what GNU patch reports (line and offset
    included). Relational, so it holds whatever the rows are when it runs."""
    manifest = load_manifest(REPO_ROOT)
    rows = [r for r in rows_from_manifest(manifest) if r.kind == "patch" and r.patch is not None]
    if not rows:
        pytest.skip("the shipped series has no patch rows yet")
    new = open_pristine(f"pypi:vllm=={version}", version=version)
    old = open_pristine(manifest.source, version=manifest.pin)
    try:
        classified = classify_rows(rows, old, new)
        for row, port_row in zip(rows, classified, strict=True):
            assert row.patch is not None
            tree = tmp_path / row.name
            for fp in row.patch.files:
                content = new.read(fp.old_path) if fp.old_path is not None else None
                if content is not None:
                    target = tree / fp.old_path.decode()
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(content)
            mine = [
                (
                    h.path.decode(),
                    h.number,
                    "failed" if h.status in ("conflict", "upstream") else "offset",
                    h.line if h.status in ("exact", "offset") else None,
                )
                for h in port_row.alone.hunks
                if h.status != "exact"
            ]
            row_entry = manifest.row(row.name)
            assert row_entry is not None and row_entry.patch is not None
            counts = {fp.path.decode(): len(fp.hunks) for fp in row.patch.files}
            assert gnu_verdicts(tree, REPO_ROOT / row_entry.patch, counts) == mine, row.name
    finally:
        new.close()
        old.close()

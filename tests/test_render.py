"""``render``: PATCHES.md and patches/series from the manifest; stable, escaped; ``--check`` writes nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hyperqwen_patches.series import render
from hyperqwen_patches.series.manifest import load_manifest

REPO = Path(__file__).resolve().parent.parent
SHA_A = "a" * 40
SHA_B = "b" * 40

MANIFEST = f"""\
format: 1
pin: "0.29.0"
package: vllm
export_points:
  - name: main
    branch: hyperqwen/v0.29.0
    commit: {SHA_A}
    base: {SHA_B}
rows:
  - name: memory-profile-after-warmup
    patch: patches/0001-memory-profile-after-warmup.patch
    kind: fix
    what: Profile memory after the warm-up | not before
    upstream: https://github.com/vllm-project/vllm/pull/1
    cut_against: "0.29.0"
    retires_when: upstream merges the PR
    export_point: main
    commit: {SHA_A}
  - name: kvarn-modules
    files: kvarn/files
    kind: own
    what: |
      KVarN modules, two | lines
      with *stars* and <html>
    cut_against: "0.29.0"
    retires_when: never (our own code)
  - name: old-fix
    patch: patches/0003-old-fix.patch
    kind: backport
    what: an old backport
    upstream: vllm-project/vllm#2
    cut_against: "0.28.0"
    retires_when: "0.30.0"
    skip: carried by 0.29.0 already
retirements:
  - row: gone-later
    pin: "0.10.0"
    upstream: vllm-project/vllm#4
    reason: merged upstream
    evidence: reverse-applies
  - row: old-fix
    pin: "0.9.0"
    upstream: vllm-project/vllm#2
    reason: merged | upstream
    evidence: reverse-applies on the wheel
    hunk: "hunk #2 of vllm/envs.py"
"""

LEDGER = """\
# PATCHES — the series carried on vllm 0.29.0

Rendered from `patches/manifest.yaml` by `hyperqwen-patches render`; do not edit by hand
(`hyperqwen-patches check` fails when this file differs from what `render` writes). The apply
order is `patches/series`; patch paths are relative to the directory that holds `vllm/`, applied with
`patch -p1 --fuzz 0`.

- **pin**: vllm 0.29.0
- **pristine source**: pypi:vllm==0.29.0
- **rows**: 2 applied, 1 skipped; **retirements**: 2

## Export points

| export point | branch | commit | base |
| --- | --- | --- | --- |
| main | hyperqwen/v0.29.0 | aaaaaaaaaaaa | bbbbbbbbbbbb |

## Series

| # | row | patch | kind | what | upstream | cut against | retires when | export point | commit |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
| 1 | memory-profile-after-warmup | patches/0001-memory-profile-after-warmup.patch | fix | Profile memory after the warm-up \\| not before | <https://github.com/vllm-project/vllm/pull/1> | 0.29.0 | upstream merges the PR | main | aaaaaaaaaaaa |
| 2 | kvarn-modules | kvarn/files/ | own | KVarN modules, two \\| lines with \\*stars\\* and \\<html\\> | — | 0.29.0 | never (our own code) | — | — |

## Skipped rows

Kept for history, not applied.

| row | patch | kind | reason |
| --- | --- | --- | --- |
| old-fix | patches/0003-old-fix.patch | backport | carried by 0.29.0 already |

## Retirements

### Carried by vllm 0.9.0

| row | hunk | upstream | reason | evidence |
| --- | --- | --- | --- | --- |
| old-fix | hunk \\#2 of vllm/envs.py | vllm-project/vllm\\#2 | merged \\| upstream | reverse-applies on the wheel |

### Carried by vllm 0.10.0

| row | hunk | upstream | reason | evidence |
| --- | --- | --- | --- | --- |
| gone-later | — | vllm-project/vllm\\#4 | merged upstream | reverse-applies |
"""

SERIES = """\
# The apply order of the series, rendered from patches/manifest.yaml by
# `hyperqwen-patches render`: do not edit by hand. Paths are relative to this directory
# (quilt's convention); apply each with `patch -p1 --fuzz 0` run in the directory that holds vllm/.
# Lines starting with '#' are comments (module-file rows and skipped rows appear as comments),
# so a plain loop reads it with: grep -v '^#' patches/series
0001-memory-profile-after-warmup.patch
# files: ../kvarn/files/ (row kvarn-modules: module files, copied into the tree)
# skipped: 0003-old-fix.patch (row old-fix: carried by 0.29.0 already)
"""


def make_repo(tmp_path: Path, manifest: str = MANIFEST) -> Path:
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches/manifest.yaml").write_text(manifest)
    return tmp_path


def hqp(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", *argv], capture_output=True, text=True
    )


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_golden_ledger_and_series(tmp_path: Path) -> None:
    files = render.render(load_manifest(make_repo(tmp_path)))
    assert files["PATCHES.md"].decode() == LEDGER
    assert files["patches/series"].decode() == SERIES


def test_a_pipe_in_any_field_cannot_break_a_table(tmp_path: Path) -> None:
    text = render.render_ledger(load_manifest(make_repo(tmp_path)))
    for line in text.splitlines():
        if line.startswith("|"):
            cells = re.split(r"(?<!\\)\|", line)[1:-1]
            assert len(cells) in (4, 5, 10), line  # the export point, retirement and series tables


def test_md_escapes_and_autolinks() -> None:
    assert render.md("a|b") == "a\\|b"
    assert render.md("two\nlines") == "two lines"
    assert (
        render.md("*x* _y_ `z` [l](u) <b> \\") == "\\*x\\* \\_y\\_ \\`z\\` \\[l\\](u) \\<b\\> \\\\"
    )
    assert render.md("https://example.org/a_b?x=1") == "<https://example.org/a_b?x=1>"
    assert render.md("https://example.org/a|b") == "https://example.org/a\\|b"
    assert render.md(None) == "—" and render.md("") == "—"


def test_output_is_stable(tmp_path: Path) -> None:
    root = make_repo(tmp_path)
    first = render.render(load_manifest(root))
    # Key order inside a mapping does not matter; row order does (it is the apply order).
    shuffled = MANIFEST.replace("    kind: fix\n    what: Profile", "    what: Profile").replace(
        "    retires_when: upstream merges the PR\n",
        "    retires_when: upstream merges the PR\n    kind: fix\n",
    )
    (root / "patches/manifest.yaml").write_text(shuffled)
    assert render.render(load_manifest(root)) == first


def test_render_writes_then_check_is_clean(tmp_path: Path) -> None:
    root = make_repo(tmp_path)
    proc = hqp("render", "--repo", str(root))
    assert proc.returncode == 0, proc.stderr
    assert "render: wrote PATCHES.md, patches/series" in proc.stderr
    assert (root / "PATCHES.md").read_text() == LEDGER
    assert (root / "patches/series").read_text() == SERIES
    assert (root / "PATCHES.md").stat().st_mode & 0o777 == 0o644
    assert not [p for p in root.rglob(".*.tmp")]
    before = snapshot(root)
    proc = hqp("render", "--repo", str(root), "--check")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    proc = hqp("render", "--repo", str(root))
    assert "already up to date" in proc.stderr
    assert snapshot(root) == before  # an up-to-date file is not even rewritten


def test_render_check_fails_with_a_diff_and_writes_nothing(tmp_path: Path) -> None:
    root = make_repo(tmp_path)
    (root / "PATCHES.md").write_text(LEDGER.replace("an old backport", "x"))
    (root / "patches/series").write_text(SERIES.replace("0001-memory", "0009-memory"))
    os.chmod(root / "PATCHES.md", 0o600)
    before = snapshot(root)
    proc = hqp("render", "--repo", str(root), "--check")
    assert proc.returncode == 1
    assert "--- a/patches/series\n+++ b/patches/series\n" in proc.stdout
    assert (
        "-0009-memory-profile-after-warmup.patch\n+0001-memory-profile-after-warmup.patch\n"
        in proc.stdout
    )
    assert "error: render --check: patches/series differ from what render writes" in proc.stderr
    assert "PATCHES.md" not in proc.stdout  # its content was current (only the mode differed)
    assert snapshot(root) == before
    # A missing file diffs from /dev/null.
    (root / "PATCHES.md").unlink()
    proc = hqp("render", "--repo", str(root), "--check")
    assert proc.returncode == 1 and "--- /dev/null\n+++ b/PATCHES.md\n" in proc.stdout
    assert not (root / "PATCHES.md").exists()


def test_render_keeps_an_existing_mode(tmp_path: Path) -> None:
    root = make_repo(tmp_path)
    (root / "PATCHES.md").write_text("old\n")
    os.chmod(root / "PATCHES.md", 0o664)
    assert render.write(load_manifest(root)) == ["PATCHES.md", "patches/series"]
    assert (root / "PATCHES.md").stat().st_mode & 0o777 == 0o664


def test_package_convention_says_so(tmp_path: Path) -> None:
    root = make_repo(
        tmp_path, MANIFEST.replace("package: vllm\n", "package: vllm\npaths: package\n")
    )
    files = render.render(load_manifest(root))
    assert (
        "`patch -p1 --fuzz 0` run inside the vllm/ package directory."
        in files["patches/series"].decode()
    )
    assert (
        "patch paths are relative to the `vllm/` package directory" in files["PATCHES.md"].decode()
    )


def test_shipped_files_are_current() -> None:
    """The repository's own PATCHES.md and patches/series are what render writes (invariant 6)."""
    assert render.drift(load_manifest(REPO)) == []


@pytest.mark.parametrize("version,key", [("0.9.0", (0, 9, 0)), ("0.10.0rc1", (0, 10, -1))])
def test_version_key_orders_numerically(version: str, key: tuple[int, ...]) -> None:
    assert tuple(k[0] for k in render.version_key(version)) == key

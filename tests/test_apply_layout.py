"""``apply DIR`` when the patches' path convention and DIR's layout disagree: refused, naming the one
directory beside DIR that the paths fit, and the hint true (applying there works, and GNU patch agrees).

The incident (issue 38, item 11): package-relative patches (``a/v1/...``) given a release root that
holds ``vllm/`` were refused with the hint "give ... the one with vllm/ in it", which DIR already was;
only DIR/vllm worked.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import require_gnu_patch

WORKER = "".join(f"worker line {i}\n" for i in range(20))
ENVS = "".join(f"KNOB_{i} = {i}\n" for i in range(10))

# Package-relative: a file one directory down and one at the package's top.
PACKAGE_PATCH = f"""\
--- a/v1/worker.py
+++ b/v1/worker.py
@@ -9,6 +9,7 @@
{"".join(" " + line for line in WORKER.splitlines(keepends=True)[8:11])}+patched worker line
{"".join(" " + line for line in WORKER.splitlines(keepends=True)[11:14])}--- a/envs.py
+++ b/envs.py
@@ -1,2 +1,3 @@
 KNOB_0 = 0
+KNOB_NEW = 1
 KNOB_1 = 1
"""
ROOT_PATCH = PACKAGE_PATCH.replace(" a/", " a/vllm/").replace(" b/", " b/vllm/")


def hqp(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", *map(str, args)],
        cwd=cwd, capture_output=True, text=True, check=False,
    )  # fmt: skip


def release(top: Path, package: str = "vllm") -> Path:
    (top / package / "v1").mkdir(parents=True)
    (top / package / "v1/worker.py").write_text(WORKER)
    (top / package / "envs.py").write_text(ENVS)
    (top / "setup.py").write_text("# the release's root\n")
    return top


def snapshot(top: Path) -> dict[str, bytes]:
    return {
        p.relative_to(top).as_posix(): p.read_bytes() for p in sorted(top.rglob("*")) if p.is_file()
    }


def gnu(tmp_path: Path, patch: Path, subdir: str) -> dict[str, bytes]:
    top = release(tmp_path / "gnu")
    subprocess.run(
        [require_gnu_patch(), "-p1", "--fuzz", "0", "--batch", "-s", "-i", patch],
        cwd=top / subdir, check=True,
    )  # fmt: skip
    return snapshot(top)


def test_package_relative_patches_given_the_release_root_name_its_package_directory(
    tmp_path: Path,
) -> None:
    top = release(tmp_path / "release")
    patch = tmp_path / "pkg.patch"
    patch.write_text(PACKAGE_PATCH)
    before = snapshot(top)
    proc = hqp("apply", top, "--patch", patch, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert f"their paths fit {top / 'vllm'} (2 of the 2 files they edit are there)" in proc.stderr
    assert f"hint: give {top / 'vllm'} as DIR" in proc.stderr
    assert "with vllm/ in it" not in proc.stderr
    assert snapshot(top) == before
    # The hint is true: applied there, the tree is GNU patch's.
    done = hqp("apply", top / "vllm", "--patch", patch, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert snapshot(top) == gnu(tmp_path, patch, "vllm")


def test_root_relative_patches_given_the_package_directory_name_its_parent(
    tmp_path: Path,
) -> None:
    top = release(tmp_path / "release")
    patch = tmp_path / "root.patch"
    patch.write_text(ROOT_PATCH)
    before = snapshot(top)
    proc = hqp("apply", top / "vllm", "--patch", patch, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert f"hint: give {top.resolve()} as DIR" in proc.stderr
    assert snapshot(top) == before
    done = hqp("apply", top, "--patch", patch, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert snapshot(top) == gnu(tmp_path, patch, ".")


def test_two_directories_that_fit_equally_are_not_guessed_between(tmp_path: Path) -> None:
    top = tmp_path / "two"
    release(top, "vllm")
    shutil.copytree(top / "vllm", top / "vllm_copy")
    patch = tmp_path / "pkg.patch"
    patch.write_text(PACKAGE_PATCH)
    proc = hqp("apply", top, "--patch", patch, cwd=tmp_path)
    assert proc.returncode == 2
    assert "their paths fit" not in proc.stderr and " as DIR" not in proc.stderr
    assert "the package directory (site-packages/vllm) for paths like v1/..." in proc.stderr


def test_a_paths_package_series_applies_to_the_release_root_and_names_it_from_below(
    tmp_path: Path,
) -> None:
    """A manifest's package-relative rows are read as root-relative: DIR is the release root."""
    repo = tmp_path / "repo"
    (repo / "patches").mkdir(parents=True)
    (repo / "patches/pkg.patch").write_text(PACKAGE_PATCH)
    (repo / "patches/manifest.yaml").write_text(
        'format: 1\npin: "0.29.0"\npackage: vllm\npaths: package\nrows:\n'
        '  - name: pkg\n    kind: fix\n    what: a row\n    cut_against: "0.29.0"\n'
        "    retires_when: never\n    patch: patches/pkg.patch\n"
    )
    top = release(tmp_path / "release")
    below = hqp("apply", top / "vllm", "--repo", repo, cwd=tmp_path)
    assert below.returncode == 2 and f"hint: give {top.resolve()} as DIR" in below.stderr
    done = hqp("apply", top, "--repo", repo, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert snapshot(top) == gnu(tmp_path, repo / "patches/pkg.patch", "vllm")
    assert os.path.isfile(top / "setup.py")

"""Every file of the repository the tool reads refuses a FIFO, a directory (and a device) with one
line naming it, instead of waiting forever on a FIFO that has no writer or a traceback (issue 43,
item 7); ``export --check`` never walks a module directory linked outside the repository (item 8).

Real files, real FIFOs, the real CLI in a subprocess with a timeout: a hang fails the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_check import make_repo
from test_rowedit import project  # noqa: F401  (the fixture)

TIMEOUT = 60


def hqp(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", *argv],
        capture_output=True, text=True, cwd=root, timeout=TIMEOUT, check=False,
    )  # fmt: skip


def replace_with(path: Path, kind: str) -> None:
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()


def errors(proc: subprocess.CompletedProcess[str]) -> list[tuple[str, str]]:
    doc = json.loads(proc.stdout)
    return [(f["check"], f["message"]) for f in doc["findings"] if f["severity"] == "error"]


@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_a_manifest_that_is_not_a_file_is_one_line_naming_it(tmp_path: Path, kind: str) -> None:
    root, _ = make_repo(tmp_path)
    replace_with(root / "patches/manifest.yaml", kind)
    proc = hqp(root, "list")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    problem = [line for line in proc.stderr.splitlines() if "patches/manifest.yaml" in line][-1]
    # named as the manifest (it used to be passed over: "no patches/manifest.yaml ... above it")
    assert problem.strip().startswith("patches/manifest.yaml: the manifest patches/manifest.yaml")
    assert "not a regular file" in problem or "Is a directory" in problem


@pytest.mark.parametrize(
    ("target", "check", "message"),
    [
        (
            "patches/0001-envs-knob.patch",
            "apply",
            "row envs-knob (patches/0001-envs-knob.patch): the patch file "
            "patches/0001-envs-knob.patch is not a regular file",
        ),
        (
            "kvarn/files/vllm/v1/kvarn.py",
            "apply",
            "row kvarn-modules (kvarn/files): module file vllm/v1/kvarn.py is not a regular file",
        ),
        (
            "patches/series",
            "series",
            "the file patches/series is not a regular file (run: hyperqwen-patches render)",
        ),
        (
            "docker/requirements.txt",
            "pin",
            "the file docker/requirements.txt is not a regular file",
        ),
    ],
)
def test_a_fifo_in_the_repository_is_a_finding_not_a_hang(
    tmp_path: Path, target: str, check: str, message: str
) -> None:
    root, _ = make_repo(tmp_path)
    replace_with(root / target, "fifo")
    proc = hqp(root, "check", "--json")
    assert proc.returncode == 1, proc.stderr
    assert (check, message) in errors(proc)


@pytest.mark.parametrize("target", ["patches/series", "PATCHES.md"])
@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_render_refuses_to_replace_what_is_not_a_regular_file(
    tmp_path: Path, target: str, kind: str
) -> None:
    root, _ = make_repo(tmp_path)
    replace_with(root / target, kind)
    proc = hqp(root, "render")
    assert proc.returncode == 2, proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert f"the file {target} " in line and "render writes only over regular files" in line
    assert (root / target).is_fifo() if kind == "fifo" else (root / target).is_dir()
    drift = hqp(root, "check", "--json")
    assert ("render", "differs from what render writes (run: hyperqwen-patches render)") in errors(
        drift
    )


def _module_row(series: Path) -> None:
    """Turn the fixture's new-module row into a module-file row (``files: kvarn/files``)."""
    manifest = series / "patches/manifest.yaml"
    manifest.write_text(
        manifest.read_text().replace("patch: patches/new-module.patch", "files: kvarn/files")
    )
    (series / "patches/new-module.patch").unlink()


def test_export_check_does_not_walk_a_module_directory_linked_outside(
    project: tuple[Path, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    """It walked the outside directory and printed its files' names as "removed"."""
    series, fork = project
    _module_row(series)
    outside = tmp_path / "outside"
    (outside / "files/vllm/hqp").mkdir(parents=True)
    (outside / "files/vllm/hqp/secret_name.py").write_text("not the repository's\n")
    (series / "kvarn").symlink_to(outside)
    proc = hqp(series, "export", "--fork", str(fork), "--check")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "secret_name" not in proc.stdout + proc.stderr
    assert "outside the repository" in proc.stderr
    assert (outside / "files/vllm/hqp/secret_name.py").read_text() == "not the repository's\n"
    # the same directory inside the repository is compared as before
    (series / "kvarn").unlink()
    (outside / "files/vllm/hqp/secret_name.py").unlink()
    os.rename(outside, series / "kvarn")
    inside = hqp(series, "export", "--fork", str(fork), "--check")
    assert "outside the repository" not in inside.stderr
    assert "kvarn/files/vllm/hqp/module.py" in inside.stdout + inside.stderr


def test_export_check_refuses_a_fifo_or_a_link_inside_a_module_directory(
    project: tuple[Path, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    series, fork = project
    _module_row(series)
    (series / "kvarn/files/vllm/hqp").mkdir(parents=True)
    os.mkfifo(series / "kvarn/files/vllm/hqp/module.py")
    proc = hqp(series, "export", "--fork", str(fork), "--check")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "module file kvarn/files/vllm/hqp/module.py is not a regular file" in proc.stderr
    os.unlink(series / "kvarn/files/vllm/hqp/module.py")
    (tmp_path / "elsewhere.py").write_text("x = 1\n")
    (series / "kvarn/files/vllm/hqp/module.py").symlink_to(tmp_path / "elsewhere.py")
    linked = hqp(series, "export", "--fork", str(fork), "--check")
    assert linked.returncode == 2, linked.stdout + linked.stderr
    assert "kvarn/files/vllm/hqp/module.py is a symbolic link" in linked.stderr

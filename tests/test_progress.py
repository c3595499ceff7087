"""Progress off a terminal (a CI log): a line when a long step starts and one when it ends, with its
time and a download's size; a failure ends its step as failed; an error that stopped several checks
is printed once; a release that cannot be fetched is tried once per run, not once per check."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT
from test_pristine import PKG, build_wheel

from hyperqwen_patches.commands.progress import StderrProgress
from hyperqwen_patches.sources.pristine import open_pristine


def test_a_step_is_a_start_line_and_an_end_line_with_its_time(
    capfd: pytest.CaptureFixture[str],
) -> None:
    progress = StderrProgress()  # stderr is captured: not a terminal
    assert not progress.live
    with progress.step("import: 3 rows"):
        pass
    with pytest.raises(RuntimeError), progress.waiting("verifying x.whl"):
        raise RuntimeError("boom")
    out, err = capfd.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert lines[0] == "import: 3 rows ..."
    assert re.fullmatch(r"import: 3 rows: done in \d+\.\d s", lines[1])
    assert lines[2] == "verifying x.whl ..."
    assert re.fullmatch(r"verifying x\.whl: failed after \d+\.\d s", lines[3])
    assert len(lines) == 4


def test_a_download_ends_with_its_size(capfd: pytest.CaptureFixture[str]) -> None:
    with StderrProgress().download("downloading pypi:x==1") as update:
        update(5 << 20, None)
        update(300 << 20, 300 << 20)
    lines = capfd.readouterr().err.splitlines()
    assert lines[0] == "downloading pypi:x==1 ..."
    assert re.fullmatch(r"downloading pypi:x==1: 300 MB in \d+\.\d s", lines[1])


def test_quiet_says_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    progress = StderrProgress(quiet=True)
    with progress.step("a"), progress.download("b") as update:
        update(1, 1)
    assert capfd.readouterr() == ("", "")


def test_a_real_fetch_tells_its_download_and_verification(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    links = tmp_path / "links"
    build_wheel(links)
    monkeypatch.setenv("HQP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0", progress=StderrProgress()).close()
    said = [line for line in capfd.readouterr().err.splitlines() if line]
    assert said[0] == f"downloading pypi:{PKG}==1.0 ..."
    assert re.fullmatch(rf"downloading pypi:{PKG}==1\.0: \d+ kB in \d+\.\d s", said[1])
    assert said[2].startswith("verifying hqpfake-1.0-py3-none-any.whl ...")
    assert re.search(r": done in \d+\.\d s$", said[3])


def test_an_offline_check_tries_once_and_says_the_error_once(tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PIP_")},
        "HQP_CACHE": str(tmp_path / "cache"),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",  # the discard port: refused at once
        "PIP_RETRIES": "0",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", "check"], cwd=REPO_ROOT, env=env,
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    starts = [line for line in proc.stderr.splitlines() if line.startswith("downloading ")]
    assert len(starts) == 2 and starts[1].startswith("downloading pypi:vllm==0.29.0: failed after")
    errors = [line for line in proc.stdout.splitlines() if line.startswith("ERROR ")]
    assert len(errors) == 1, proc.stdout
    assert (
        errors[0].startswith("ERROR [apply, replay-identity, ") and "cannot be reached" in errors[0]
    )
    assert "fork          not opened" in proc.stdout

"""docker/install.sh refuses what it must refuse before anything is built on it.

Incident this prevents: an image whose docker/requirements.txt named another vLLM than the manifest's
pin would install it and fail (or worse, pass) far from the cause. The verify step compares the
installed vLLM with the manifest. The venv here is real and so is pip; the installed ``vllm`` is a
tiny distribution at another version, laid out as pip lays one out (package and dist-info; the 5 GB
release is not needed to show the refusal).
The full run of every step on the real vLLM 0.29.0 is scripts/docker-ci.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hyperqwen_patches.series.manifest import load_manifest

REPO = Path(__file__).resolve().parent.parent
INSTALL = REPO / "docker" / "install.sh"


def run_install(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", INSTALL, *map(str, args)], capture_output=True, text=True, check=False, timeout=300
    )


def test_an_unknown_step_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    result = run_install("--venv", tmp_path / "venv", "--steps", "requirements,bogus")
    assert result.returncode == 2
    assert "unknown step 'bogus'" in result.stderr
    assert not (tmp_path / "venv").exists()


def test_the_venv_is_required() -> None:
    result = run_install("--steps", "verify")
    assert result.returncode == 2
    assert "--venv DIR is required" in result.stderr


@pytest.mark.slow
def test_verify_refuses_a_vllm_other_than_the_manifest_pin(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=120)
    # A distribution as pip leaves one: the package and its dist-info (what importlib.metadata reads).
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (site / "vllm").mkdir()
    (site / "vllm" / "__init__.py").write_text("")
    (site / "vllm-0.28.0.dist-info").mkdir()
    (site / "vllm-0.28.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: vllm\nVersion: 0.28.0\n"
    )
    # The tool venv is the one running these tests (it has hyperqwen-patches installed).
    result = run_install("--venv", venv, "--tool-venv", Path(sys.prefix), "--steps", "verify")
    assert result.returncode == 2, result.stderr
    pin = load_manifest(REPO).pin
    assert f"vllm 0.28.0 is installed but patches/manifest.yaml pins {pin}" in result.stderr

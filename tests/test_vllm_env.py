"""scripts/vllm-env picks its torch build as the README says, seen through a fake pip.

The real script runs against a stand-in ``python3`` whose ``-m venv`` makes an environment with a fake
``python`` and ``pip``: they log every call and answer as a given package index would (a CPU wheel
found, only PyPI's build, the network down). Nothing is downloaded; the script, docker/cpu-torch.sh,
flock, sed and du are the real ones.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from conftest import REPO_ROOT

VLLM_ENV = REPO_ROOT / "scripts" / "vllm-env"

FAKE_PYTHON3 = """#!/usr/bin/env bash
# python3 -m venv DIR: an environment whose python and pip are the fakes below
[ "$1" = "-m" ] && [ "$2" = "venv" ] || { echo "fake python3: unexpected $*" >&2; exit 99; }
mkdir -p "$3/bin"
cp "$FAKE_DIR/venv-python" "$3/bin/python"
cp "$FAKE_DIR/venv-pip" "$3/bin/pip"
"""

FAKE_VENV_PYTHON = """#!/usr/bin/env bash
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then shift 2; exec "$(dirname "$0")/pip" "$@"; fi
case "$2" in
  *importlib.metadata*) [ -n "${FAKE_TORCH_INSTALLED:-}" ] || exit 1; echo "$FAKE_TORCH_INSTALLED" ;;
  *"import vllm"*) echo "vllm 0.29.0 torch (fake)" ;;
  *) echo "fake python: unexpected $*" >&2; exit 99 ;;
esac
"""

# FAKE_INDEX: "cpu" (a CPU wheel is reachable), "pypi" (only PyPI's build), "index" (a CPU wheel only
# behind HQP_TORCH_INDEX), "down" (every download fails).
FAKE_VENV_PIP = """#!/usr/bin/env bash
args=" $* "
args="${args/ --disable-pip-version-check / }"
echo "pip${args% }" >> "$FAKE_LOG"
[[ "$args" == " install "* ]] || exit 0
if [ "$FAKE_INDEX" = down ]; then
  echo "ERROR: Could not install packages due to an OSError: Max retries exceeded" >&2; exit 1
fi
case "$*" in
  # vLLM's own install: the torch it names is the one already installed, so pip is satisfied
  *"vllm=="*) exit 0 ;;
  *"torch==2.13.0+cpu"*)
    if [ "$FAKE_INDEX" = cpu ]; then exit 0; fi
    if [ "$FAKE_INDEX" = index ] && [[ "$*" == *"--extra-index-url https://torch.example/cpu"* ]]; then exit 0; fi
    echo "ERROR: Could not find a version that satisfies the requirement torch==2.13.0+cpu" >&2
    echo "ERROR: No matching distribution found for torch==2.13.0+cpu" >&2
    exit 1 ;;
esac
exit 0
"""


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def run_vllm_env(
    tmp_path: Path, index: str, **env: str
) -> tuple[subprocess.CompletedProcess, list]:
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    _script(fakes / "python3", FAKE_PYTHON3)
    _script(fakes / "venv-python", FAKE_VENV_PYTHON)
    _script(fakes / "venv-pip", FAKE_VENV_PIP)
    log = tmp_path / "pip.log"
    log.touch()
    full_env = {
        **{k: v for k, v in os.environ.items() if k != "HQP_TORCH_INDEX"},
        "PATH": f"{fakes}:{os.environ['PATH']}",
        "FAKE_DIR": str(fakes),
        "FAKE_LOG": str(log),
        "FAKE_INDEX": index,
        "HQP_CACHE": str(tmp_path / "cache"),
        **env,
    }
    done = subprocess.run(
        [str(VLLM_ENV)], env=full_env, capture_output=True, text=True, timeout=60, check=False
    )
    return done, log.read_text().splitlines()


def installs(calls: list[str]) -> list[str]:
    return [c for c in calls if c.startswith("pip install")]


def test_a_cpu_wheel_pip_finds_is_taken_and_vllm_is_held_to_it(tmp_path: Path) -> None:
    done, calls = run_vllm_env(tmp_path, "cpu")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("/bin/python")
    first, second = installs(calls)
    assert first.endswith("torch==2.13.0+cpu")
    assert "vllm==0.29.0" in second and "torch==2.13.0+cpu" in second.split()
    assert "triton==3.6.0" in second.split()  # the GPU machine's Triton
    assert "CUDA build" not in done.stderr
    assert "vllm-env: built in" in done.stderr and "on disk" in done.stderr


def test_hqp_torch_index_is_where_the_cpu_wheel_is_looked_for(tmp_path: Path) -> None:
    done, calls = run_vllm_env(tmp_path, "index", HQP_TORCH_INDEX="https://torch.example/cpu")
    assert done.returncode == 0, done.stderr
    assert "--extra-index-url https://torch.example/cpu" in installs(calls)[0]
    assert "torch==2.13.0+cpu" in installs(calls)[1].split()


def test_only_pypi_gives_its_torch_said_in_one_line_with_the_size(tmp_path: Path) -> None:
    done, calls = run_vllm_env(tmp_path, "pypi")
    assert done.returncode == 0, done.stderr
    tried_cpu, pypi, rest = installs(calls)
    assert tried_cpu.endswith("torch==2.13.0+cpu")
    assert pypi.split()[-1] == "torch==2.13.0"
    assert "torch==2.13.0" in rest.split() and "torch==2.13.0+cpu" not in rest
    # PyPI's torch pins its own Triton (3.7.1): a pin of ours would make pip's resolution impossible
    assert "triton" in rest.split() and "triton==3.6.0" not in rest
    said = [line for line in done.stderr.splitlines() if "CUDA build" in line]
    assert len(said) == 1 and "3.7 GB" in said[0], done.stderr
    # pip's own "No matching distribution" is not shown: the one line says it
    assert "No matching distribution" not in done.stderr


def test_a_failure_other_than_no_wheel_stops_without_the_cuda_download(tmp_path: Path) -> None:
    done, calls = run_vllm_env(tmp_path, "down")
    assert done.returncode == 2
    assert len(installs(calls)) == 1, calls  # the CUDA build was not tried
    assert "Max retries exceeded" in done.stderr
    assert not (tmp_path / "cache" / "envs" / "vllm-0.29.0-torch-2.13.0-v1").exists()
    leftovers = [p.name for p in (tmp_path / "cache" / "envs").iterdir() if "building" in p.name]
    assert leftovers == []


@pytest.mark.parametrize("installed", ["2.13.0", "2.13.0+cpu"])
def test_a_torch_already_there_is_kept(tmp_path: Path, installed: str) -> None:
    done, calls = run_vllm_env(tmp_path, "pypi", FAKE_TORCH_INSTALLED=installed)
    assert done.returncode == 0, done.stderr
    (only,) = installs(calls)  # no torch download: vLLM's install, held to the torch that is there
    assert "vllm==0.29.0" in only and f"torch=={installed}" in only.split()
    assert f"torch {installed} already installed" in done.stderr

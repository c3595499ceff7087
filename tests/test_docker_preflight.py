"""docker/preflight.sh: FlashInfer's JIT must get an nvcc from CUDA 13 or newer.

Incident: on a native install whose system nvcc was CUDA 12, vLLM 0.29.0 loaded the model and then
died at FlashInfer's first JIT compile with ``nvcc fatal : Unknown option '--compress-mode=size'``.

The CUDA 13 compiler here is the real one, from the ``nvidia-cuda-nvcc`` wheel that vLLM 0.29's
dependencies install (downloaded once into the cache). The *old* compiler is a stand-in script that
prints CUDA 12.8's exact ``nvcc --version`` banner and fails on ``--compress-mode=size`` as CUDA 12's
nvcc does: no CUDA 12 nvcc can be installed from PyPI (``nvidia-cuda-nvcc-cu12`` ships ptxas only)
and a Debian CUDA 12 toolkit is gigabytes. That the symlinked toolkit really compiles and links with
FlashInfer's flags is checked inside the vLLM environment (tests_vllm/docker/test_preflight_jit.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import TEST_CACHE

REPO = Path(__file__).resolve().parent.parent
PREFLIGHT = REPO / "docker" / "preflight.sh"
NVCC_WHEEL = "nvidia-cuda-nvcc==13.0.88"

OLD_NVCC = """#!/bin/sh
# Stand-in for CUDA 12.8's nvcc (see the module docstring): its banner, and its refusal.
for arg in "$@"; do
  case "$arg" in
    --version)
      echo 'nvcc: NVIDIA (R) Cuda compiler driver'
      echo 'Copyright (c) 2005-2025 NVIDIA Corporation'
      echo 'Built on Fri_Feb_21_20:23:50_PST_2025'
      echo 'Cuda compilation tools, release 12.8, V12.8.93'
      echo 'Build cuda_12.8.r12.8/compiler.35583870_0'
      exit 0 ;;
    --compress-mode=*)
      echo "nvcc fatal   : Unknown option '$arg'" >&2
      exit 1 ;;
  esac
done
exit 0
"""


@pytest.fixture(scope="session")
def cu13_wheel_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bin/ of the real CUDA 13.0 compiler wheel, unpacked (the wheel is cached across runs)."""
    # Session-scoped, so before the per-test isolation: the session's download cache (conftest).
    cache = TEST_CACHE / "wheels"
    cache.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache.glob("nvidia_cuda_nvcc-13.0.88-*.whl"))
    if not wheels:
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "download", "-q", "--no-deps"),
                *("--only-binary=:all:", "-d", str(cache), NVCC_WHEEL),
            ],
            check=True,
            timeout=300,
        )
        wheels = sorted(cache.glob("nvidia_cuda_nvcc-13.0.88-*.whl"))
    assert wheels, f"pip download {NVCC_WHEEL} left no wheel in {cache}"
    out = tmp_path_factory.mktemp("cu13wheel")
    with zipfile.ZipFile(wheels[0]) as zf:
        for member in zf.namelist():
            if member.startswith("nvidia/cu13/bin/"):
                zf.extract(member, out)
                target = out / member
                target.chmod(0o755)
    return out / "nvidia" / "cu13" / "bin"


def old_toolkit(root: Path) -> Path:
    """A toolkit directory whose bin/nvcc is the CUDA 12.8 stand-in."""
    (root / "bin").mkdir(parents=True)
    nvcc = root / "bin" / "nvcc"
    nvcc.write_text(OLD_NVCC)
    nvcc.chmod(0o755)
    return root


def pip_site_packages(root: Path, cu13_bin: Path) -> Path:
    """A site-packages holding nvidia/cu13 as pip lays it out (bin from the real wheel)."""
    cu13 = root / "nvidia" / "cu13"
    (cu13 / "lib").mkdir(parents=True)
    (cu13 / "include").mkdir()
    (cu13 / "bin").symlink_to(cu13_bin)
    # The runtime wheel's file name; the link test against the real library is in tests_vllm.
    (cu13 / "lib" / "libcudart.so.13").write_bytes(b"")
    return root


def run_preflight(
    tmp_path: Path, env: dict[str, str], path_dirs: tuple[Path, ...] = ()
) -> subprocess.CompletedProcess[str]:
    # A PATH without this machine's own nvcc (/usr/local/bin here) so each test chooses its compiler.
    base = {
        "HOME": os.environ["HOME"],
        "PATH": os.pathsep.join([*map(str, path_dirs), "/usr/bin", "/bin"]),
        "HQP_PYTHON": sys.executable,
        "HQP_CUDA_SHIM_DIR": str(tmp_path / "shim" / "cuda-home"),
        "PYTHONPATH": "",
    }
    base.update(env)
    return subprocess.run(
        ["bash", str(PREFLIGHT)], env=base, capture_output=True, text=True, check=False, timeout=60
    )


def exported_cuda_home(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stdout.splitlines() if line.startswith("CUDA_HOME=")]
    assert len(lines) == 1, result.stdout
    return lines[0].removeprefix("CUDA_HOME=")


def test_the_stand_in_behaves_like_cuda_12(tmp_path: Path) -> None:
    nvcc = old_toolkit(tmp_path / "cuda-12.8") / "bin" / "nvcc"
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True)
    assert "release 12.8, V12.8.93" in version.stdout
    refused = subprocess.run(
        [nvcc, "--compress-mode=size", "-c", "k.cu"], capture_output=True, text=True
    )
    assert refused.returncode == 1
    assert "Unknown option '--compress-mode=size'" in refused.stderr


@pytest.mark.network
def test_a_cuda_13_toolkit_is_left_alone(tmp_path: Path, cu13_wheel_bin: Path) -> None:
    home = tmp_path / "cuda-13.0"
    home.mkdir()
    (home / "bin").symlink_to(cu13_wheel_bin)
    result = run_preflight(tmp_path, {"CUDA_HOME": str(home)})
    assert result.returncode == 0, result.stderr
    assert "nvcc 13.0" in result.stderr
    assert exported_cuda_home(result) == str(home)
    assert not (tmp_path / "shim").exists()


def test_old_system_nvcc_without_pip_toolchain_fails_with_the_reason(tmp_path: Path) -> None:
    toolkit = old_toolkit(tmp_path / "cuda-12.8")
    # Found through PATH, as FlashInfer finds it when CUDA_HOME is unset.
    result = run_preflight(tmp_path, {}, path_dirs=(toolkit / "bin",))
    assert result.returncode == 2
    assert "nvcc 12.8" in result.stderr
    assert str(toolkit / "bin" / "nvcc") in result.stderr
    assert "Unknown option '--compress-mode=size'" in result.stderr
    assert "nvidia/cu13/bin/nvcc" in result.stderr
    assert result.stdout == ""


@pytest.mark.network
def test_old_system_nvcc_with_pip_toolchain_points_cuda_home_at_it(
    tmp_path: Path, cu13_wheel_bin: Path
) -> None:
    toolkit = old_toolkit(tmp_path / "cuda-12.8")
    site = pip_site_packages(tmp_path / "site-packages", cu13_wheel_bin)
    result = run_preflight(
        tmp_path, {"CUDA_HOME": str(toolkit), "PYTHONPATH": str(site)}, path_dirs=(toolkit / "bin",)
    )
    assert result.returncode == 0, result.stderr
    shim = Path(exported_cuda_home(result))
    assert shim == tmp_path / "shim" / "cuda-home"
    assert "nvcc 12.8" in result.stderr and "nvcc 13.0" in result.stderr
    # FlashInfer runs $CUDA_HOME/bin/nvcc and links -L$CUDA_HOME/lib64 -lcudart.
    version = subprocess.run(
        [shim / "bin" / "nvcc", "--version"], capture_output=True, text=True, check=True
    )
    assert "release 13.0," in version.stdout
    assert (shim / "lib64" / "libcudart.so").resolve() == (
        site / "nvidia" / "cu13" / "lib" / "libcudart.so.13"
    ).resolve()
    assert (shim / "include").resolve() == (site / "nvidia" / "cu13" / "include").resolve()


@pytest.mark.network
def test_no_system_nvcc_but_pip_toolchain_uses_it(tmp_path: Path, cu13_wheel_bin: Path) -> None:
    site = pip_site_packages(tmp_path / "site-packages", cu13_wheel_bin)
    result = run_preflight(
        tmp_path, {"CUDA_HOME": str(tmp_path / "nowhere"), "PYTHONPATH": str(site)}
    )
    assert result.returncode == 0, result.stderr
    assert exported_cuda_home(result) == str(tmp_path / "shim" / "cuda-home")


def test_no_compiler_anywhere_warns_and_lets_the_server_start(tmp_path: Path) -> None:
    result = run_preflight(tmp_path, {"CUDA_HOME": str(tmp_path / "nowhere")})
    assert result.returncode == 0
    assert "warning:" in result.stderr
    assert exported_cuda_home(result) == str(tmp_path / "nowhere")


def test_an_old_flashinfer_nvcc_override_fails(tmp_path: Path) -> None:
    toolkit = old_toolkit(tmp_path / "cuda-12.8")
    result = run_preflight(tmp_path, {"FLASHINFER_NVCC": str(toolkit / "bin" / "nvcc")})
    assert result.returncode == 2
    assert "FLASHINFER_NVCC=" in result.stderr
    assert "--compress-mode=size" in result.stderr


def test_skip_switch(tmp_path: Path) -> None:
    toolkit = old_toolkit(tmp_path / "cuda-12.8")
    result = run_preflight(tmp_path, {"CUDA_HOME": str(toolkit), "HQP_SKIP_PREFLIGHT": "1"})
    assert result.returncode == 0
    assert "skipped" in result.stderr
    assert exported_cuda_home(result) == str(toolkit)

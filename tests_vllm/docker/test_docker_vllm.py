"""The image's entry point and preflight against the real vLLM 0.29.0 and FlashInfer 0.6.18.

Runs inside the vLLM test environment (scripts/vllm-tests). The entry point's knobs must become flags
that vLLM's own `serve` parser accepts with the meaning intended, against the *patched* tree; the
preflight's model of how FlashInfer finds and drives nvcc must match the FlashInfer installed; and
the toolkit directory the preflight builds from pip's CUDA 13 wheels must compile with FlashInfer's
flags and link against -lcudart. (No GPU here, so -lcuda, the driver's library, is left out of the
link and no kernel runs; nothing else is a stand-in except the CUDA 12 nvcc, a script, because no
CUDA 12 compiler can be installed from PyPI.)
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENTRYPOINT = REPO / "docker" / "entrypoint.sh"
PREFLIGHT = REPO / "docker" / "preflight.sh"


def vllm_env(**extra: str) -> dict[str, str]:
    """The environment for a subprocess that imports the patched vLLM on the CPU."""
    env = dict(os.environ)
    patched = os.environ.get("HQP_VLLM_PATCHED")
    if patched:
        env["PYTHONPATH"] = patched
    env["VLLM_TARGET_DEVICE"] = "cpu"
    env.update(extra)
    return env


def test_the_entry_point_flags_parse_as_meant_in_vllm() -> None:
    result = subprocess.run(
        [sys.executable, REPO / "docker" / "check_serve_args.py", ENTRYPOINT],
        env=vllm_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        cwd="/",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    oks = [line for line in result.stderr.splitlines() if line.startswith("ok   ")]
    assert len(oks) == 3, result.stderr


def test_on_0_29_the_exported_retention_variable_alone_is_ignored_by_vllm_serve() -> None:
    # Why the entry point turns the variable into the flag: the flag's unset default wins.
    code = """
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
ns = make_arg_parser(FlexibleArgumentParser()).parse_args(["m"])
print("interval", repr(AsyncEngineArgs.from_cli_args(ns).prefix_cache_retention_interval))
"""
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=vllm_env(VLLM_PREFIX_CACHE_RETENTION_INTERVAL="64"),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        cwd="/",
    )
    assert result.returncode == 0, result.stderr
    assert "interval UNSET" in result.stdout


def test_vllm_serve_help_lists_every_flag_the_entry_point_passes() -> None:
    knobs = {
        "GPU_UTIL": "0.95",
        "REQ_METRICS_DETAILED": "1",
        "VLLM_PREFIX_CACHE_RETENTION_INTERVAL": "0",
        "HQP_DRY_RUN": "1",
        "HQP_SKIP_PREFLIGHT": "1",
    }
    argv = subprocess.run(
        ["bash", ENTRYPOINT, "m"],
        env={**os.environ, **knobs},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    flags = [a for a in argv if a.startswith("--")]
    assert len(flags) == 3
    help_text = subprocess.run(
        [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", "--help=all"],
        env=vllm_env(),
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        cwd="/",
    ).stdout
    for flag in flags:
        assert f"  {flag} " in help_text or f"  {flag}=" in help_text, flag
    assert "--per-request-spec-decode-metrics {detailed,none,summary}" in help_text


# --- the preflight and FlashInfer -------------------------------------------------------------------


def flashinfer_file(rel: str) -> str:
    spec = importlib.util.find_spec("flashinfer")
    assert spec is not None and spec.submodule_search_locations
    return (Path(next(iter(spec.submodule_search_locations))) / rel).read_text()


def test_flashinfer_still_works_the_way_the_preflight_assumes() -> None:
    core = flashinfer_file("jit/core.py")
    cpp_ext = flashinfer_file("jit/cpp_ext.py")
    assert '"--compress-mode=size"' in core  # the option CUDA 12's nvcc refuses
    assert 'os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")' in cpp_ext
    assert '["which", "nvcc"]' in cpp_ext
    assert '"-L$cuda_home/lib64"' in cpp_ext and '"-lcudart"' in cpp_ext
    assert 'os.environ.get("FLASHINFER_NVCC", "$cuda_home/bin/nvcc")' in cpp_ext


OLD_NVCC = """#!/bin/sh
case "$*" in
  *--version*) echo 'Cuda compilation tools, release 12.8, V12.8.93'; exit 0 ;;
  *--compress-mode=*) echo "nvcc fatal   : Unknown option '--compress-mode=size'" >&2; exit 1 ;;
esac
"""

KERNEL = r"""
#include <cuda_runtime.h>
__global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }
extern "C" int launch(float* x) { twice<<<1, 32>>>(x); return (int)cudaGetLastError(); }
"""


def test_the_pip_toolchain_compiles_and_links_with_flashinfers_flags(tmp_path: Path) -> None:
    old = tmp_path / "cuda-12.8"
    (old / "bin").mkdir(parents=True)
    (old / "bin" / "nvcc").write_text(OLD_NVCC)
    (old / "bin" / "nvcc").chmod(0o755)
    shim = tmp_path / "home" / "cuda-home"
    result = subprocess.run(
        ["bash", PREFLIGHT],
        env={
            "HOME": str(tmp_path / "home"),
            "PATH": f"{old / 'bin'}:/usr/bin:/bin",
            "CUDA_HOME": str(old),
            "HQP_PYTHON": sys.executable,
            "HQP_CUDA_SHIM_DIR": str(shim),
        },
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert f"CUDA_HOME={shim}" in result.stdout
    assert "nvcc 12.8" in result.stderr

    # FlashInfer's cuda_cflags (jit/core.py) and ldflags (jit/cpp_ext.py), less -lcuda (no driver).
    (tmp_path / "k.cu").write_text(KERNEL)
    compile_argv = [
        *(str(shim / "bin" / "nvcc"), "-std=c++17", "-use_fast_math", "-Xfatbin=-compress-all"),
        *("--compress-mode=size", "-gencode=arch=compute_90a,code=sm_90a", "-Xcompiler", "-fPIC"),
        *("-c", "k.cu", "-o", "k.o"),
    ]
    built = subprocess.run(
        compile_argv, cwd=tmp_path, capture_output=True, text=True, check=False, timeout=300
    )
    assert built.returncode == 0, built.stderr
    linked = subprocess.run(
        [
            *("c++", "-shared", "k.o", "-o", "k.so"),
            *(f"-L{shim}/lib64", f"-L{shim}/lib64/stubs", "-lcudart"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert linked.returncode == 0, linked.stderr
    assert (tmp_path / "k.so").stat().st_size > 0


def test_the_wheel_directory_itself_would_not_link(tmp_path: Path) -> None:
    # Why the preflight builds a toolkit directory instead of pointing CUDA_HOME at nvidia/cu13.
    spec = importlib.util.find_spec("nvidia")
    assert spec is not None and spec.submodule_search_locations
    cu13 = next(
        Path(p) / "cu13"
        for p in spec.submodule_search_locations
        if (Path(p) / "cu13" / "bin" / "nvcc").exists()
    )
    (tmp_path / "k.cu").write_text(KERNEL)
    subprocess.run(
        [cu13 / "bin" / "nvcc", "-Xcompiler", "-fPIC", "-c", "k.cu", "-o", "k.o"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=300,
    )
    linked = subprocess.run(
        ["c++", "-shared", "k.o", "-o", "k.so", f"-L{cu13}/lib64", "-lcudart"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert linked.returncode != 0
    assert "cannot find -lcudart" in linked.stderr


@pytest.mark.parametrize("name", ["nvcc", "ptxas", "cicc"])
def test_the_pip_toolchain_has_what_nvcc_runs(name: str) -> None:
    spec = importlib.util.find_spec("nvidia")
    assert spec is not None and spec.submodule_search_locations
    roots = [Path(p) / "cu13" for p in spec.submodule_search_locations]
    found = [r for r in roots for _ in r.rglob(name)]
    assert found, f"{name} is not in {roots}"

"""docker/entrypoint.sh: the knobs become `vllm serve` flags, bad values stop the container early.

The real script runs under bash with HQP_DRY_RUN=1, which prints the command it would exec (one
argument per line) instead of starting vLLM; the preflight is skipped here because
tests/test_docker_preflight.py covers it. That each printed flag is one vLLM 0.29.0's `serve` parser
accepts, with the value we mean, is checked inside the vLLM environment
(tests_vllm/docker/test_serve_args.py) and by scripts/docker-ci.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ENTRYPOINT = REPO / "docker" / "entrypoint.sh"
KNOBS = ("GPU_UTIL", "REQ_METRICS", "REQ_METRICS_DETAILED", "VLLM_PREFIX_CACHE_RETENTION_INTERVAL")


def run_entrypoint(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in KNOBS}
    base.update({"HQP_DRY_RUN": "1", "HQP_SKIP_PREFLIGHT": "1"})
    base.update(env or {})
    return subprocess.run(
        ["bash", str(ENTRYPOINT), *args],
        env=base,
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )


def argv_of(*args: str, env: dict[str, str] | None = None) -> list[str]:
    result = run_entrypoint(*args, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_defaults_serve_at_095_and_pass_arguments_after_the_knobs() -> None:
    assert argv_of("Qwen/Qwen3-8B", "--max-model-len", "32768") == [
        "vllm",
        "serve",
        "--gpu-memory-utilization",
        "0.95",
        "Qwen/Qwen3-8B",
        "--max-model-len",
        "32768",
    ]


def test_gpu_util_is_passed_through() -> None:
    argv = argv_of("m", env={"GPU_UTIL": "0.9"})
    assert argv[2:4] == ["--gpu-memory-utilization", "0.9"]


def test_an_explicit_flag_comes_after_the_knob_so_it_wins() -> None:
    # argparse keeps the last occurrence: the user's own flag must follow the knob's.
    argv = argv_of("m", "--gpu-memory-utilization", "0.5", env={"GPU_UTIL": "0.9"})
    assert argv.index("0.9") < argv.index("0.5")


@pytest.mark.parametrize("value", ["0", "0.0", "1.5", "95", "abc", "0,9", "-0.5"])
def test_a_gpu_util_outside_0_1_stops_with_its_name(value: str) -> None:
    result = run_entrypoint("m", env={"GPU_UTIL": value})
    assert result.returncode == 2
    assert f"GPU_UTIL={value}" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"REQ_METRICS": "1"}, "summary"),
        ({"REQ_METRICS_DETAILED": "1"}, "detailed"),
        ({"REQ_METRICS": "1", "REQ_METRICS_DETAILED": "1"}, "detailed"),
        ({"REQ_METRICS": "0", "REQ_METRICS_DETAILED": "1"}, "detailed"),
    ],
)
def test_request_metrics_knobs(env: dict[str, str], expected: str) -> None:
    argv = argv_of("m", env=env)
    flag = argv.index("--per-request-spec-decode-metrics")
    assert argv[flag + 1] == expected
    assert argv.count("--per-request-spec-decode-metrics") == 1


@pytest.mark.parametrize("env", [{}, {"REQ_METRICS": "0"}, {"REQ_METRICS": ""}])
def test_request_metrics_off_adds_no_flag(env: dict[str, str]) -> None:
    assert "--per-request-spec-decode-metrics" not in argv_of("m", env=env)


@pytest.mark.parametrize("name", ["REQ_METRICS", "REQ_METRICS_DETAILED"])
def test_a_switch_that_is_not_0_or_1_stops(name: str) -> None:
    result = run_entrypoint("m", env={name: "yes"})
    assert result.returncode == 2
    assert f"{name}=yes" in result.stderr


def test_the_exported_retention_interval_becomes_the_flag() -> None:
    argv = argv_of("m", env={"VLLM_PREFIX_CACHE_RETENTION_INTERVAL": "64"})
    flag = argv.index("--prefix-cache-retention-interval")
    assert argv[flag + 1] == "64"


def test_an_empty_retention_interval_counts_as_unset() -> None:
    argv = argv_of("m", env={"VLLM_PREFIX_CACHE_RETENTION_INTERVAL": ""})
    assert "--prefix-cache-retention-interval" not in argv


@pytest.mark.parametrize("value", ["-1", "1.5", "None", "64k"])
def test_a_retention_interval_that_is_not_a_whole_number_stops(value: str) -> None:
    result = run_entrypoint("m", env={"VLLM_PREFIX_CACHE_RETENTION_INTERVAL": value})
    assert result.returncode == 2
    assert f"VLLM_PREFIX_CACHE_RETENTION_INTERVAL={value}" in result.stderr


def test_arguments_keep_spaces_and_quotes() -> None:
    spec = '{"method": "eagle3", "model": "/models/my draft", "num_speculative_tokens": 3}'
    argv = argv_of("/models/my model", "--speculative-config", spec, env={"REQ_METRICS": "1"})
    assert argv[-3:] == ["/models/my model", "--speculative-config", spec]


def test_every_knob_at_once() -> None:
    argv = argv_of(
        "m",
        env={
            "GPU_UTIL": "0.93",
            "REQ_METRICS_DETAILED": "1",
            "VLLM_PREFIX_CACHE_RETENTION_INTERVAL": "0",
        },
    )
    assert argv == [
        "vllm",
        "serve",
        "--gpu-memory-utilization",
        "0.93",
        "--per-request-spec-decode-metrics",
        "detailed",
        "--prefix-cache-retention-interval",
        "0",
        "m",
    ]


def test_a_failed_preflight_stops_before_vllm(tmp_path: Path) -> None:
    # FLASHINFER_NVCC naming a missing compiler is a preflight error whatever else is installed.
    result = run_entrypoint(
        "m",
        env={"HQP_SKIP_PREFLIGHT": "", "FLASHINFER_NVCC": str(tmp_path / "nvcc")},
    )
    assert result.returncode == 2
    assert "FLASHINFER_NVCC" in result.stderr
    assert result.stdout == ""

"""Row memory-profile-after-warmup: Worker.determine_available_memory, pristine against patched.

The incident: a default-profile boot on a 3090 was refused with a cold compile cache (4.42 GiB
available against 4.76 GiB needed) and passed warm (5.37 GiB), because the first profile_run compiled
and autotuned inside the measured window and its scratch was read as the model's transient peak.

The device is a mock (fake_device.py: no GPU here); the Worker, memory_profiling and the budget
arithmetic are vLLM's own code from each tree. The same scenario runs against both trees, and the
pristine outcome is asserted too, so the test proves the row changes it.
"""

from __future__ import annotations

from typing import Any

import pytest
from fake_device import GiB, MiB
from vllm_trees import run_scenario

P = {
    "total": 80 * GiB,
    "context": 512 * MiB,  # CUDA context, made before the init snapshot
    "requested": 72 * GiB,  # gpu_memory_utilization 0.9
    "weights": 16 * GiB,
    "workspace": 256 * MiB,  # persistent memory made by the first pass
    "kernels": 96 * MiB,  # loaded kernels: outside the allocator
    "scratch": 3 * GiB,  # autotune scratch of the cold compile
    "activation": 1 * GiB,  # the model's real transient peak
    "estimate": 700 * MiB,  # profile_cudagraph_memory
    "pinned": 20 * GiB,  # kv_cache_memory_bytes for the pinned path
}
# Persistent memory since the init snapshot, whichever pass made it.
TOTAL_CONSUMED = P["weights"] + P["workspace"] + P["kernels"]


@pytest.fixture(scope="module")
def outcome() -> dict[str, dict[str, Any]]:
    return {
        kind: run_scenario(kind, "scenario_profile_window.py", P)
        for kind in ("pristine", "patched")
    }


def headroom(result: dict[str, Any]) -> int:
    # Worker.peak_activation_memory = transient_peak_headroom + the applied graph estimate.
    return result["peak_activation_memory"] - result["cudagraph_memory_estimate"]


def test_patched_headroom_is_the_activation_peak(outcome):
    assert headroom(outcome["patched"]["profiled"]) == P["activation"]


def test_pristine_headroom_includes_the_compile_scratch(outcome):
    assert headroom(outcome["pristine"]["profiled"]) == P["activation"] + P["scratch"]


@pytest.mark.parametrize("kind", ["pristine", "patched"])
def test_total_consumed_counts_persistent_memory_either_way(outcome, kind):
    # The warm-up pass moves no persistent memory out of the budget: total_consumed is measured
    # from the init snapshot, so the first pass's workspace and kernels stay counted.
    assert outcome[kind]["profiled"]["total_consumed"] == TOTAL_CONSUMED


@pytest.mark.parametrize(
    ("kind", "transient"),
    [("pristine", P["activation"] + P["scratch"]), ("patched", P["activation"])],
)
def test_budget_is_requested_minus_consumed_activation_and_estimate(outcome, kind, transient):
    r = outcome[kind]["profiled"]
    expected = P["requested"] - (TOTAL_CONSUMED + transient) - P["estimate"]
    assert r["available_kv_cache_memory_bytes"] == expected
    assert r["returned"] == expected  # no multimodal reservation in this scenario
    assert r["cudagraph_memory_estimate"] == P["estimate"]


def test_patched_runs_one_uncounted_pass_then_the_measured_window(outcome):
    # Warm-up, synchronize, release the cache; then memory_profiling: empty_cache, reset the peak,
    # the measured profile_run, empty_cache; then the graph estimate.
    assert outcome["patched"]["profiled"]["profile_runs"] == 2
    assert outcome["patched"]["profiled"]["events"] == [
        "profile_run",
        "synchronize",
        "empty_cache",
        "empty_cache",
        "reset_peak",
        "profile_run",
        "empty_cache",
        "profile_cudagraph_memory",
    ]


def test_pristine_measures_the_first_pass(outcome):
    assert outcome["pristine"]["profiled"]["profile_runs"] == 1
    assert outcome["pristine"]["profiled"]["events"] == [
        "empty_cache",
        "reset_peak",
        "profile_run",
        "empty_cache",
        "profile_cudagraph_memory",
    ]


@pytest.mark.parametrize("kind", ["pristine", "patched"])
def test_pinned_path_runs_profile_run_exactly_once(outcome, kind):
    pinned = outcome[kind]["pinned"]
    assert pinned["profile_runs"] == 1
    assert pinned["events"] == ["profile_run"]  # nothing measured
    assert pinned["returned"] == P["pinned"]

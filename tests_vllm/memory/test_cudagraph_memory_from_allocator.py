"""Row cudagraph-memory-from-allocator: capture_model and the graph-memory estimate (Model Runner V2).

The incident: on one downstream box a cold compile of new kernels during capture made the estimate
read 5.44 GiB for a real 0.23 GiB graph pool, because the pool was measured as the drop in the
driver's free memory; the boot was refused at -0.97 GiB available.

The device, its graphs and the manager's forward functions are mocks (see the scenario: no GPU here);
capture_model, CudaGraphManager.capture's sample bracket, profile_cudagraph_memory and the
extrapolation are vLLM's own code from each tree. Both trees run; the pristine outcome (the driver
figure) is asserted too, so the test proves the row changes it.
"""

from __future__ import annotations

from typing import Any

import pytest
from fake_device import GiB, MiB
from vllm_trees import run_scenario

R = 1280 * MiB  # graph pool, by the allocator
O = 512 * MiB  # noqa: E741 (the issue calls it O): what the driver sees beside it (instantiation memory, kernels loaded meanwhile)
P: dict[str, Any] = {
    "total": 80 * GiB,
    "context": 512 * MiB,
    "R": R,
    "O": O,
    "piecewise_graphs": 3,
    "piecewise_cost": 8 * MiB,
    "overhead": 2 * MiB,  # per graph, by the driver only
    "warmup": 16 * MiB,  # each eager warmup leaves this much cached
    "full_costs": [64 * MiB, 4 * MiB, 4 * MiB, 4 * MiB, 4 * MiB, 4 * MiB],
}
FLOOR = 1 << 20  # _MIN_PER_GRAPH_BYTES


@pytest.fixture(scope="module")
def outcome() -> dict[str, dict[str, Any]]:
    return {
        kind: run_scenario(kind, "scenario_cudagraph.py", P) for kind in ("pristine", "patched")
    }


def gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB"


def test_patched_capture_model_returns_the_allocator_delta(outcome):
    assert outcome["patched"]["capture_model"]["returned"] == R


def test_patched_capture_model_logs_both_figures(outcome):
    finished = [m for m in outcome["patched"]["capture_model"]["log"] if "Graph capturing" in m]
    assert len(finished) == 1
    assert f"took {gib(R)} (allocator reserved" in finished[0]
    assert f"driver free memory dropped {gib(R + O)}" in finished[0]


def test_pristine_capture_model_returns_the_driver_delta(outcome):
    assert outcome["pristine"]["capture_model"]["returned"] == R + O
    (finished,) = [m for m in outcome["pristine"]["capture_model"]["log"] if "Graph capturing" in m]
    assert f"took {gib(R + O)}" in finished


@pytest.mark.parametrize(("kind", "returned"), [("pristine", R + O), ("patched", R)])
def test_v1_capture_model_follows_the_same_unit(outcome, kind, returned):
    # Model Runner V1 gets the change for consistency (its estimate samples read reserved too).
    v1 = outcome[kind]["capture_model_v1"]
    assert v1["returned"] == returned
    (finished,) = [m for m in v1["log"] if "Graph capturing" in m]
    assert f"took {gib(returned)}" in finished
    if kind == "patched":
        assert f"driver free memory dropped {gib(R + O)}" in finished


def extrapolation(samples: list[int], full_graphs: int) -> int:
    # _extrapolate_full_graph_memory, restated: first sample + (N - 1) x max(second sample, floor).
    return samples[0] + (full_graphs - 1) * max(samples[1], FLOOR)


@pytest.mark.parametrize("kind", ["pristine", "patched"])
def test_estimate_is_measured_minus_samples_plus_extrapolation(outcome, kind):
    e = outcome[kind]["estimate"]
    (measured,) = e["measured"]
    assert e["full_graphs"] == len(P["full_costs"]) and e["min_per_graph"] == FLOOR
    assert e["estimate"] == measured - sum(e["samples"]) + extrapolation(e["samples"], 6)


def test_patched_estimate_is_in_allocator_units(outcome):
    e = outcome["patched"]["estimate"]
    first, second = P["full_costs"][:2]
    pieces = P["piecewise_graphs"] * P["piecewise_cost"]
    # The samples are the sampled graphs' own pool growth: warmup blocks cached before the bracket
    # are released before its first read, and the driver's overhead is not in them.
    assert e["samples"] == [first, second]
    assert e["measured"] == [pieces + first + second]
    assert e["estimate"] == pieces + first + 5 * max(second, FLOOR)


def test_patched_samples_log_the_driver_beside_them(outcome):
    lines = [
        m for m in outcome["patched"]["estimate"]["log"] if m.startswith("CG profiling sample")
    ]
    first, second = P["full_costs"][:2]
    assert lines == [
        f"CG profiling sample: {first} bytes reserved, {first + P['overhead']} bytes by the driver",
        f"CG profiling sample: {second} bytes reserved, {second + P['overhead']} bytes by the driver",
    ]


def test_pristine_estimate_is_the_driver_figure(outcome):
    e = outcome["pristine"]["estimate"]
    first, second = P["full_costs"][:2]
    over, warm = P["overhead"], P["warmup"]
    pieces = P["piecewise_graphs"] * (P["piecewise_cost"] + over)
    # Driver deltas: every graph's overhead counted, and each sample loses the warmup blocks that
    # torch.cuda.graph() releases inside the bracket.
    assert e["measured"] == [pieces + first + over + second + over]
    assert e["samples"] == [first + over - warm, second + over - warm]
    assert e["estimate"] != outcome["patched"]["estimate"]["estimate"]

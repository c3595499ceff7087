"""Scenario: Model Runner V2's capture_model and profile_cudagraph_memory on a fake device.

The GPU and its graphs are faked (there is none here): fake_device.py stands in for the allocator and
the driver, FakeCUDAGraph/fake_graph for torch.cuda.CUDAGraph/torch.cuda.graph (whose real __enter__
empties the allocator cache, which the fake does too), and the graph manager's forward function only
allocates. What runs for real, from whichever tree PYTHONPATH names: GPUModelRunner.capture_model,
CudaGraphManager.capture (its FULL-sample bracket included), profile_cudagraph_memory and
_extrapolate_full_graph_memory.

Per graph: the pool grows by its allocator cost and the driver by ``overhead`` more (instantiation
memory the allocator cannot see). Each warmup forward leaves ``warmup`` bytes cached.

argv[1]: JSON parameters (bytes). Prints ``HQP-RESULT <json>``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from fake_device import FakeDevice
from vllm_trees import emit


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def listen(name: str) -> Iterator[list[str]]:
    """The messages vLLM's logger `name` emits inside the block, debug level included."""
    handler = Records()
    log = logging.getLogger(name)
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        yield handler.messages
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def capture_model_alone(p: dict[str, int]) -> dict[str, Any]:
    """capture_model around a manager whose capture raises reserved by R and the driver by R + O."""
    import torch
    import vllm.v1.worker.gpu.model_runner as mr

    dev = FakeDevice(total=p["total"], outside=p["context"])
    dev.install()

    class OneShotManager:
        def needs_capture(self) -> bool:
            return True

        def capture(self, *args: Any, **kwargs: Any) -> None:
            dev.graph_alloc(p["R"])
            dev.outside_alloc(p["O"])

    runner = object.__new__(mr.GPUModelRunner)
    attach_runner_state(runner, OneShotManager(), torch.device("cpu"))
    with listen(mr.__name__) as log:
        returned = runner.capture_model()
    return {"returned": returned, "log": log}


def capture_model_v1(p: dict[str, int]) -> dict[str, Any]:
    """Model Runner V1's capture_model around a capture that raises reserved by R, driver by R + O."""
    import torch
    import vllm.distributed.parallel_state as ps
    import vllm.v1.worker.gpu_model_runner as v1
    from vllm.config import CUDAGraphMode

    dev = FakeDevice(total=p["total"], outside=p["context"])
    dev.install()

    @contextlib.contextmanager
    def no_graph_capture(device: Any, graph_capture_context: Any = None) -> Iterator[None]:
        yield

    def capture_cudagraphs(**kwargs: Any) -> None:
        dev.graph_alloc(p["R"])
        dev.outside_alloc(p["O"])

    v1.graph_capture = no_graph_capture
    v1.lock_workspace = lambda: None
    ps.get_world_group = lambda: SimpleNamespace(local_rank=0)
    runner = object.__new__(v1.GPUModelRunner)
    runner.compilation_config = SimpleNamespace(cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE)
    runner.vllm_config = SimpleNamespace(
        profiler_config=SimpleNamespace(capture_torch_profiler=False)
    )
    runner.device = torch.device("cpu")
    runner.encoder_cudagraph_manager = None
    runner._maybe_init_encoder_cudagraph_manager = lambda: None
    runner.cudagraph_dispatcher = SimpleNamespace(
        get_capture_descs=lambda: [(CUDAGraphMode.FULL, ["one batch size"])]
    )
    runner._capture_cudagraphs = capture_cudagraphs
    with listen(v1.__name__) as log:
        returned = runner.capture_model()
    return {"returned": returned, "log": log}


def attach_runner_state(runner: Any, manager: Any, device: Any) -> None:
    """The attributes GPUModelRunner.capture_model reads, for a text-only model without LoRA."""
    runner.cudagraph_manager = manager
    runner.model_state = SimpleNamespace(supports_mm_inputs=False)
    runner.lora_config = None
    runner.device = device
    runner.model = None
    runner.input_buffers = None
    runner.pcp_manager = None
    runner.intermediate_tensors = None
    runner.block_tables = None
    runner.attn_groups = []
    runner.kv_cache_config = None
    runner.use_aux_hidden_state_outputs = False
    runner.speculator = None
    runner.adaptive_verification = None


def estimate(p: dict[str, Any]) -> dict[str, Any]:
    """The real profile_cudagraph_memory, PIECEWISE graphs measured whole, FULL ones sampled."""
    import torch
    import vllm.v1.worker.gpu.cudagraph_utils as cu
    import vllm.v1.worker.gpu.model_runner as mr
    from vllm.config import CUDAGraphMode

    dev = FakeDevice(total=p["total"], outside=p["context"])
    dev.install()
    capturing = False

    class FakeCUDAGraph:
        pass

    @contextlib.contextmanager
    def fake_graph(graph: Any, pool: Any = None, stream: Any = None) -> Iterator[None]:
        nonlocal capturing
        dev.empty_cache()  # torch.cuda.graph.__enter__ empties the cache before capturing
        capturing = True
        try:
            yield
        finally:
            capturing = False

    @contextlib.contextmanager
    def no_graph_capture(device: Any, graph_capture_context: Any = None) -> Iterator[None]:
        yield

    offloader = SimpleNamespace(sync_prev_onload=lambda: None, join_after_forward=lambda: None)
    torch.cuda.CUDAGraph = FakeCUDAGraph  # type: ignore[misc]
    torch.cuda.graph = fake_graph  # type: ignore[assignment]
    cu.graph_capture = no_graph_capture
    cu.is_global_first_rank = lambda: False
    cu.get_offloader = lambda: offloader
    cu.set_graph_pool_id = lambda pool: None
    cu.current_stream = lambda: None
    cu.current_platform.graph_pool_handle = lambda: object()
    cu._init_minimal_kv_cache_for_profiling = lambda runner: None
    cu._teardown_profiling_state = lambda runner: None

    # Allocator cost of each FULL graph in capture order (largest batch first), by num_tokens.
    full_costs: list[int] = p["full_costs"]
    full_cost = {len(full_costs) - i: c for i, c in enumerate(full_costs)}

    class SamplingManager(cu.CudaGraphManager):
        """The real CudaGraphManager.capture loop; forward functions that only allocate."""

        def capture(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
            def create_forward_fn(desc: Any, warmup: bool) -> Any:
                def forward_fn(mode: Any) -> None:
                    if mode == CUDAGraphMode.PIECEWISE:
                        # Piecewise graphs are captured by CUDAGraphWrapper inside the compiled
                        # model, through torch.cuda.graph as well.
                        dev.empty_cache()
                        dev.graph_alloc(p["piecewise_cost"])
                        dev.outside_alloc(p["overhead"])
                    elif capturing:
                        dev.graph_alloc(full_cost[desc.num_tokens])
                        dev.outside_alloc(p["overhead"])
                    else:  # eager warmup: activations, freed into the cache
                        dev.alloc(p["warmup"])
                        dev.free(p["warmup"])

                return forward_fn

            cu.CudaGraphManager.capture(self, create_forward_fn)

    def desc(mode: Any, n: int) -> Any:
        return cu.BatchExecutionDescriptor(cg_mode=mode, num_tokens=n, num_reqs=n)

    manager = object.__new__(SamplingManager)
    manager.device = torch.device("cpu")
    manager.graphs = {}
    manager.pool = None
    manager.use_breakable_cg = False
    manager._graphs_captured = False
    manager._max_full_descs_to_capture = None
    manager._capture_mem_samples = None
    manager._capture_descs = {
        CUDAGraphMode.PIECEWISE: [
            desc(CUDAGraphMode.PIECEWISE, n) for n in range(p["piecewise_graphs"], 0, -1)
        ],
        CUDAGraphMode.FULL: [desc(CUDAGraphMode.FULL, n) for n in full_cost],
    }

    runner = object.__new__(mr.GPUModelRunner)
    attach_runner_state(runner, manager, torch.device("cpu"))
    runner.compilation_config = SimpleNamespace(cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE)
    runner.vllm_config = SimpleNamespace()
    measured: list[int] = []
    real_capture_model = runner.capture_model

    def recording_capture_model() -> int:
        measured.append(real_capture_model())
        return measured[-1]

    runner.capture_model = recording_capture_model
    with listen(cu.__name__) as log:
        result = cu.profile_cudagraph_memory(runner)
    return {
        "estimate": result,
        "measured": measured,
        "samples": manager._capture_mem_samples,
        "full_graphs": len(manager._capture_descs[CUDAGraphMode.FULL]),
        "min_per_graph": cu._MIN_PER_GRAPH_BYTES,
        "log": log,
    }


def main() -> None:
    p = json.loads(sys.argv[1])
    emit(
        {
            "capture_model": capture_model_alone(p),
            "capture_model_v1": capture_model_v1(p),
            "estimate": estimate(p),
        }
    )


if __name__ == "__main__":
    main()

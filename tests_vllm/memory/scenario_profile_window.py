"""Scenario: vLLM's Worker.determine_available_memory on a fake device (run in a subprocess).

The GPU is faked (fake_device.py: there is none here); the Worker, memory_profiling, MemorySnapshot and
the KV-cache budget arithmetic are vLLM's own, from whichever tree PYTHONPATH names. The model runner
is a stand-in whose profile_run allocates like a cold torch.compile does on its first call only:
a persistent workspace, kernels loaded outside the allocator, and autotune scratch alive beside the
activations. Later calls allocate only the activations.

argv[1]: JSON parameters (sizes in bytes). Prints ``HQP-RESULT <json>``.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace
from typing import Any

from fake_device import FakeDevice
from vllm_trees import emit


class ColdCompileRunner:
    """Stands in for the model runner: profile_run's allocations, no model."""

    def __init__(self, dev: FakeDevice, p: dict[str, int]) -> None:
        self.dev = dev
        self.p = p
        self.model_memory_usage = p["weights"]
        self.profile_runs = 0

    def profile_run(self) -> None:
        self.profile_runs += 1
        self.dev.events.append("profile_run")
        p, dev = self.p, self.dev
        if self.profile_runs == 1:  # cold compile cache: compile and autotune happen here
            dev.alloc(p["workspace"])  # persistent: stays allocated
            dev.outside_alloc(p["kernels"])  # loaded modules: the driver sees them
            dev.alloc(p["scratch"])  # autotune scratch, alive while the model runs
        dev.alloc(p["activation"])
        dev.free(p["activation"])
        if self.profile_runs == 1:
            dev.free(p["scratch"])

    def profile_cudagraph_memory(self) -> int:
        self.dev.events.append("profile_cudagraph_memory")
        return self.p["estimate"]


def determine(p: dict[str, int], pinned: int | None) -> dict[str, Any]:
    import vllm.v1.worker.gpu_worker as gw
    from vllm.config import CUDAGraphMode
    from vllm.utils.mem_utils import MemorySnapshot

    dev = FakeDevice(total=p["total"], outside=p["context"])
    dev.install()
    # The estimate is taken on CUDA only; this is a CUDA device as far as the worker can tell.
    gw.current_platform.is_cuda_alike = lambda: True

    init_snapshot = MemorySnapshot(device="cpu")  # Worker.init_device: before the weights
    dev.alloc(p["weights"])
    runner = ColdCompileRunner(dev, p)

    worker = object.__new__(gw.Worker)
    worker.cache_config = SimpleNamespace(kv_cache_memory_bytes=pinned, gpu_memory_utilization=0.9)
    worker.model_runner = runner
    worker.init_snapshot = init_snapshot
    worker.requested_memory = p["requested"]
    worker.model_config = SimpleNamespace(multimodal_config=None)
    worker.parallel_config = SimpleNamespace()
    worker.vllm_config = SimpleNamespace(
        compilation_config=SimpleNamespace(cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE)
    )
    dev.events.clear()
    returned = worker.determine_available_memory()
    out: dict[str, Any] = {
        "returned": returned,
        "profile_runs": runner.profile_runs,
        "events": dev.events,
    }
    if pinned is None:
        out |= {
            "total_consumed": worker.total_consumed,
            "peak_activation_memory": worker.peak_activation_memory,
            "cudagraph_memory_estimate": worker.cudagraph_memory_estimate,
            "available_kv_cache_memory_bytes": worker.available_kv_cache_memory_bytes,
        }
    return out


def main() -> None:
    p = json.loads(sys.argv[1])
    emit({"profiled": determine(p, None), "pinned": determine(p, p["pinned"])})


if __name__ == "__main__":
    main()

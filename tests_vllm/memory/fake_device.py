"""A fake CUDA device and caching allocator, installed onto ``torch.accelerator``.

This is a mock, and on purpose: the memory-accounting code of vLLM 0.29.0 reads a GPU's allocator
(allocated, peak, reserved) and its driver (free memory), and there is no GPU on the machines that run
these tests. Everything else the tests exercise is vLLM's own code, imported from a pristine or a
patched tree. The model is the smallest one that keeps the quantities vLLM reads apart:

- ``allocated``: live blocks of the default pool (``allocated_bytes.all.current``), with its peak;
- ``cached``: freed blocks the allocator keeps (released by ``empty_cache``);
- ``pool``: blocks held by CUDA graph pools (not released by ``empty_cache`` while graphs live);
- ``outside``: device memory the allocator never sees (CUDA context, loaded kernels, the driver's
  per-graph instantiation memory, other libraries).

``memory_reserved`` = allocated + cached + pool; the driver's free memory = total - reserved - outside.

Only ever install it in a subprocess (scenario scripts): it replaces functions of ``torch.accelerator``
for the whole process.
"""

from __future__ import annotations

from typing import Any

import torch

MiB = 1 << 20
GiB = 1 << 30


class FakeDevice:
    def __init__(self, total: int, outside: int = 0) -> None:
        self.total = total
        self.allocated = 0
        self.peak = 0
        self.cached = 0
        self.pool = 0
        self.outside = outside
        self.events: list[str] = []

    # What a program does on the device.
    def alloc(self, n: int) -> None:
        self.cached -= min(self.cached, n)  # reuse cached blocks first
        self.allocated += n
        self.peak = max(self.peak, self.allocated)

    def free(self, n: int) -> None:
        self.allocated -= n
        self.cached += n

    def graph_alloc(self, n: int) -> None:
        self.pool += n

    def outside_alloc(self, n: int) -> None:
        self.outside += n

    @property
    def reserved(self) -> int:
        return self.allocated + self.cached + self.pool

    @property
    def driver_free(self) -> int:
        return self.total - self.reserved - self.outside

    # The torch.accelerator functions vLLM calls.
    def memory_stats(self, device: Any = None) -> dict[str, int]:
        return {
            "allocated_bytes.all.peak": self.peak,
            "allocated_bytes.all.current": self.allocated,
        }

    def get_memory_info(self, device: Any = None) -> tuple[int, int]:
        return self.driver_free, self.total

    def memory_reserved(self, device: Any = None) -> int:
        return self.reserved

    def empty_cache(self) -> None:
        self.events.append("empty_cache")
        self.cached = 0

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        self.events.append("reset_peak")
        self.peak = self.allocated

    def synchronize(self, device: Any = None) -> None:
        self.events.append("synchronize")

    def install(self) -> None:
        for name in (
            "memory_stats",
            "get_memory_info",
            "memory_reserved",
            "empty_cache",
            "reset_peak_memory_stats",
            "synchronize",
        ):
            setattr(torch.accelerator, name, getattr(self, name))

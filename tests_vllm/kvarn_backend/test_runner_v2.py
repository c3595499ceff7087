"""kvarn-v2-runner-0.29.0.patch: Model Runner V2 gives KVarN tile-sized kernel blocks and tells it
when a request's blocks go away.

The runner itself cannot be built here (it needs a GPU and a model); the patched functions are called
on real attention groups and backends, with stand-ins only for the runner's device-side state
(``req_states``, ``block_tables``), which are plain containers of the fields the patch reads.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from vllm.v1.attention.backends.kvarn_attn import KVarNAttentionBackend
from vllm.v1.attention.backends.registry import AttentionBackendEnum
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVQuantMode
from vllm.v1.worker.gpu import attn_utils
from vllm.v1.worker.gpu.model_runner import GPUModelRunner
from vllm.v1.worker.utils import AttentionGroup, select_common_block_size


def _group(backend, block_size: int, gid: int) -> AttentionGroup:
    spec = FullAttentionSpec(
        block_size=block_size,
        num_kv_heads=4,
        head_size=128,
        dtype=torch.uint8,
        kv_quant_mode=KVQuantMode.KVARN,
    )
    return AttentionGroup(backend, [f"layer.{gid}"], spec, gid)


def _cfg(cache_dtype: str):
    return SimpleNamespace(cache_config=SimpleNamespace(cache_dtype=cache_dtype))


def test_select_common_block_size_alone_keeps_the_manager_block():
    """Why the runner hunk exists: without a current vLLM config the backend offers both tiles, and
    the stock selection keeps a 128-token kernel block for a G = 64 preset."""
    assert select_common_block_size(128, [KVarNAttentionBackend]) == 128


@pytest.mark.parametrize(
    ("cache_dtype", "tile"), [("kvarn_k4v2_g128", 128), ("kvarn_k4v4_g64", 64)]
)
@pytest.mark.parametrize("manager_block", [128, 256, 512])
def test_kernel_block_is_forced_to_the_tile(cache_dtype, tile, manager_block):
    flash = AttentionBackendEnum.FLASH_ATTN.get_class()
    groups = [[_group(KVarNAttentionBackend, manager_block, 0)], [_group(flash, 32, 1)]]
    sizes = [manager_block, 16]
    attn_utils._force_tile_kernel_block_sizes(sizes, groups, _cfg(cache_dtype))
    assert sizes == [tile, 16]  # the other backend's group is left alone


def test_manager_block_not_a_multiple_of_the_tile_is_refused():
    groups = [[_group(KVarNAttentionBackend, 96, 0)]]
    with pytest.raises(ValueError, match="96 is not a multiple of its tile of 64"):
        attn_utils._force_tile_kernel_block_sizes([96], groups, _cfg("kvarn_k4v2_g64"))


class _Builder:
    def __init__(self) -> None:
        self.released: list[list[int]] = []

    def release_blocks(self, block_ids: torch.Tensor) -> None:
        self.released.append(block_ids.tolist())


def _runner(calls: list[str]) -> tuple[GPUModelRunner, _Builder]:
    runner = object.__new__(GPUModelRunner)
    builder = _Builder()
    kvarn_group = SimpleNamespace(get_metadata_builder=lambda i=0: builder)
    other_group = SimpleNamespace(get_metadata_builder=lambda i=0: object())  # no release_blocks
    runner.attn_groups = [[kvarn_group], [other_group]]
    runner.req_states = SimpleNamespace(
        req_id_to_index={"a": 1, "b": 0},
        remove_request=lambda req_id: calls.append(f"req_states:{req_id}"),
    )
    runner.model_state = SimpleNamespace(
        remove_request=lambda req_id: calls.append(f"model_state:{req_id}")
    )
    runner.block_tables = SimpleNamespace(
        num_blocks=SimpleNamespace(np=np.array([[2, 3], [1, 1]], dtype=np.int32)),
        block_tables=[
            SimpleNamespace(gpu=torch.tensor([[7, 8, 0, 0], [11, 12, 13, 99]], dtype=torch.int32)),
            SimpleNamespace(gpu=torch.tensor([[5, 0, 0, 0], [6, 0, 0, 0]], dtype=torch.int32)),
        ],
    )
    return runner, builder


def test_finished_request_releases_exactly_its_blocks_before_its_row_goes():
    calls: list[str] = []
    runner, builder = _runner(calls)
    original = builder.release_blocks
    builder.release_blocks = lambda ids: (calls.append("release"), original(ids))
    runner._remove_request("a")
    assert builder.released == [[11, 12, 13]]  # row 1, its 3 blocks; never the stale 99
    assert calls[:2] == ["release", "model_state:a"]


def test_unknown_request_and_runner_without_kv_cache_release_nothing():
    runner, builder = _runner([])
    runner._release_kv_blocks("nope")
    del runner.block_tables
    runner._release_kv_blocks("a")
    assert builder.released == []

"""Record layout, knobs and the two-tier bookkeeping: pure Python, no torch needed."""

from __future__ import annotations

import math

import pytest
from kvarn_ops import config, layout, tiers

# Offsets worked out by hand from specs/kvarn.md for the default preset, D=128:
# K codes 128·128/2 = 8192 B, then three fp16 vectors; V codes 128·128/4 = 4096 B, then three more.
DEFAULT_D128 = {
    "k_codes": (0, 8192),
    "k_scol": (8192, 256),
    "k_zp": (8448, 256),
    "k_srow": (8704, 256),
    "v_codes": (8960, 4096),
    "v_scol": (13056, 256),
    "v_srow": (13312, 256),
    "v_zp": (13568, 256),
}


def test_default_record_is_13824_bytes_with_the_spec_offsets() -> None:
    lay = layout.record_layout("kvarn_k4v2_g128", 128)
    assert lay.size == 13_824
    assert lay.bytes_per_token_head == 108
    assert lay.fields() == DEFAULT_D128


def test_d256_record_is_26880_bytes_and_840_bytes_per_token_layer() -> None:
    lay = layout.record_layout("kvarn_k4v2_g128", 256)
    assert lay.size == 26_880
    assert lay.bytes_per_token_head == 210
    assert layout.cache_bytes_per_token_layer("kvarn_k4v2_g128", 256, 4) == 840
    assert lay.fields()["v_codes"] == (17_664, 8192)
    assert lay.fields()["v_zp"] == (26_624, 256)


@pytest.mark.parametrize("name", sorted(layout.PRESETS))
@pytest.mark.parametrize("d", [128, 256])
def test_every_preset_packs_fields_back_to_back_and_pads_to_lcm(name: str, d: int) -> None:
    lay = layout.record_layout(name, d)
    p = lay.preset
    off = 0
    for _field, (start, size) in lay.fields().items():
        assert start == off
        off += size
    assert lay.payload == off
    expect_payload = d * p.group * (p.k_bits + p.v_bits) // 8 + 2 * (3 * d + 3 * p.group)
    assert off == expect_payload
    assert lay.size % math.lcm(8, p.group) == 0
    assert 0 <= lay.size - off < math.lcm(8, p.group)


def test_unknown_preset_and_head_dim_are_refused_by_name() -> None:
    with pytest.raises(layout.KVarNLayoutError, match="kvarn_k2v2_g128"):
        layout.record_layout("kvarn_k2v2_g128", 128)
    with pytest.raises(layout.KVarNLayoutError, match="head_dim 96"):
        layout.record_layout("kvarn_k4v2_g128", 96)


def test_config_defaults_and_env() -> None:
    assert config.KVarNConfig.from_env({}) == config.KVarNConfig()
    c = config.KVarNConfig.from_env(
        {
            "KVARN_SINKHORN_ITERS": "0",
            "KVARN_SPLIT_K": "off",
            "KVARN_NUM_SPLITS": "8",
            "KVARN_FUSED_DECODE": "false",
        }
    )
    assert (c.sinkhorn_iters, c.split_k, c.num_splits, c.fused_decode) == (0, False, 8, False)
    assert set(config.KNOBS) == {
        "KVARN_SINKHORN_ITERS",
        "KVARN_SPLIT_K",
        "KVARN_NUM_SPLITS",
        "KVARN_MAX_SPLITS",
        "KVARN_FUSED_DECODE",
    }


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"KVARN_SINKHORN_ITERS": "eight"}, "KVARN_SINKHORN_ITERS='eight'"),
        ({"KVARN_SPLIT_K": "maybe"}, "KVARN_SPLIT_K='maybe'"),
        ({"KVARN_MAX_SPLITS": "48"}, "KVARN_MAX_SPLITS=48"),
        ({"KVARN_NUM_SPLITS": "256"}, "KVARN_NUM_SPLITS=256"),
    ],
)
def test_config_refuses_bad_values_naming_the_variable(env: dict[str, str], needle: str) -> None:
    with pytest.raises(config.KVarNConfigError, match=needle.replace("(", r"\(")):
        config.KVarNConfig.from_env(env)


def test_config_is_frozen() -> None:
    c = config.KVarNConfig()
    with pytest.raises(AttributeError):
        c.sinkhorn_iters = 3  # type: ignore[misc]


G = 4  # a small block size keeps the flush arithmetic readable


def _simulate(book: tiers.TwoTierBook, req: str, steps: list[tuple[int, int]]):
    """Run (seq_len, query_len) steps; after each, apply the plan. Yields (step, plan)."""
    ids = list(range(100, 140))
    for seq_len, query_len in steps:
        plan = book.step(req, ids, seq_len, query_len)
        book.flushed(req, plan.flush)
        yield seq_len, query_len, plan


def test_flush_is_never_block_0_and_never_holds_an_uncommitted_token() -> None:
    book = tiers.TwoTierBook(num_slots=64, block_size=G)
    # prefill 6 (chunk), prefill to 11, then decode steps with 3 speculative tokens each (query_len 4)
    steps = [(6, 6), (11, 5)] + [(11 + 4 * k, 4) for k in range(1, 8)] + [(44, 1)]
    flushed_at: dict[int, int] = {}
    for seq_len, query_len, plan in _simulate(book, "r", steps):
        committed = seq_len - query_len
        assert plan.committed == committed
        for ref in plan.flush:
            assert ref.logical != tiers.SINK_BLOCK
            # every token of the block is committed
            assert (ref.logical + 1) * G <= committed
            assert ref.physical == 100 + ref.logical
            flushed_at[ref.logical] = seq_len
        # every block that could be flushed has been, the sink excepted
        resident = book.resident("r")
        assert tiers.SINK_BLOCK in resident
        for logical in resident:
            assert logical == tiers.SINK_BLOCK or (logical + 1) * G > committed
    # block 1 (tokens 4..7) is complete at seq_len 11 but committed only from the step at 15
    assert flushed_at[1] == 15
    assert sorted(flushed_at) == list(range(1, 43 // G))
    assert tiers.SINK_BLOCK not in flushed_at


def test_first_prefill_chunk_flushes_nothing_and_slots_come_back() -> None:
    book = tiers.TwoTierBook(num_slots=8, block_size=G)
    plan = book.step("a", list(range(8)), 16, 16)
    assert plan.flush == () and [r.logical for r in plan.allocate] == [0, 1, 2, 3]
    assert book.free_slots == 4
    plan = book.step("a", list(range(8)), 17, 1)
    assert [r.logical for r in plan.flush] == [1, 2, 3]
    assert [r.logical for r in plan.allocate] == [4]
    # a flush not yet confirmed is not planned twice
    assert book.step("a", list(range(8)), 18, 1).flush == ()
    book.flushed("a", plan.flush)
    assert book.free_slots == 8 - 2
    assert book.slot_of_position("a", 17)[1] == 1
    with pytest.raises(tiers.KVarNPoolError, match="position 5 has no pool slot"):
        book.slot_of_position("a", 5)
    freed = book.finish("a")
    assert [r.logical for r in freed] == [0, 4]
    assert book.free_slots == 8


def test_pool_exhaustion_is_a_clear_error() -> None:
    book = tiers.TwoTierBook(num_slots=2, block_size=G)
    with pytest.raises(tiers.KVarNPoolError, match="exhausted"):
        book.step("a", list(range(8)), 9, 9)


def test_table_shorter_than_the_sequence_is_refused() -> None:
    book = tiers.TwoTierBook(num_slots=8, block_size=G)
    with pytest.raises(tiers.KVarNPoolError, match="needs 3 blocks, the table has 2"):
        book.step("a", [0, 1], 9, 1)


def test_flushes_must_extend_the_compressed_prefix_in_order() -> None:
    book = tiers.TwoTierBook(num_slots=8, block_size=G)
    book.step("a", list(range(8)), 16, 16)
    plan = book.step("a", list(range(8)), 17, 1)
    assert [r.logical for r in plan.flush] == [1, 2, 3]
    assert book.compressed_end("a") == 1
    with pytest.raises(tiers.KVarNPoolError, match="block 2 flushed out of order"):
        book.flushed("a", plan.flush[1:])
    book.flushed("a", plan.flush)
    assert book.compressed_end("a") == 4

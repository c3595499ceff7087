"""KVarN: Hadamard rotation + two-axis variance normalization + 4/2-bit RTN of the KV cache.

Modules (none imports vLLM, so all run on the CPU and on a bare GPU machine):
    config      the knobs (KVarNConfig.from_env)
    layout      presets and the record layout (no torch)
    tiers       fp16 pool slots and flush decisions (no torch)
    hadamard, normalize, quant, reference   the torch reference
    triton_store                            the Triton store kernels (flush, pool write)
    decode_plan                             the decode's launch policy (splits, warps; no kernels)
    decode_shares, decode_rotation          which blocks a split reads; q's rotation (Triton)
    decode_bytes, decode_words              the decode's two code paths (Triton)
    decode_kernels, decode_combine          the decode kernel and the split-K combines
    triton_decode                           the decode's launch binding (kvarn_decode, prepare)
    triton_prefix                           multi-token queries over a cached prefix
    step                                    a decode step with no host read (CUDA graphs)

Imports inside the package are relative, so it loads as ``vllm.v1.attention.ops.kvarn`` inside vLLM
and under any name when loaded by path (tests, benchmarks). Submodules are imported lazily: importing
the package pulls in neither torch nor triton.
"""

from .config import KNOBS, KVarNConfig, KVarNConfigError
from .layout import DEFAULT_PRESET, PRESETS, Preset, RecordLayout, get_preset, record_layout

__all__ = [
    "DEFAULT_PRESET",
    "KNOBS",
    "PRESETS",
    "KVarNConfig",
    "KVarNConfigError",
    "Preset",
    "RecordLayout",
    "get_preset",
    "record_layout",
]

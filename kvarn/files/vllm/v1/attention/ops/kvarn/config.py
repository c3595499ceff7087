"""The KVarN knobs, read in one place.

The vLLM integration registers the same variable names in ``vllm/envs.py`` (so they enter the compile
cache key) and hands the values read there to :meth:`KVarNConfig.from_env`; outside vLLM a caller hands
in ``os.environ``. This module never reads the environment itself, so inside vLLM there is exactly one
reader, the one the compile cache key sees. The object is frozen: a step never changes a knob behind a
compiled kernel's back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# name -> (default, help). The integration copies this table into envs.py.
KNOBS: dict[str, tuple[str, str]] = {
    "KVARN_SINKHORN_ITERS": ("8", "variance-normalization iterations at flush (0 = plain RTN)"),
    "KVARN_SPLIT_K": (
        "1",
        "allow the split-K decode (stage 1 per split + combine) for long contexts",
    ),
    "KVARN_NUM_SPLITS": ("0", "split count for split-K decode; 0 = pick from batch and context"),
    "KVARN_MAX_SPLITS": ("128", "upper bound on the split count (power of two)"),
    "KVARN_FUSED_DECODE": (
        "1",
        "use the fused Triton decode; 0 = dequantize and run the reference",
    ),
}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class KVarNConfigError(ValueError):
    """A knob holds a value that cannot be used; the message names the variable and the value."""


def _int(env: Mapping[str, str], name: str, lo: int, hi: int) -> int:
    raw = env.get(name, KNOBS[name][0]).strip()
    try:
        value = int(raw)
    except ValueError:
        raise KVarNConfigError(f"{name}={raw!r}: expected an integer in [{lo}, {hi}]") from None
    if not lo <= value <= hi:
        raise KVarNConfigError(f"{name}={value}: expected an integer in [{lo}, {hi}]")
    return value


def _bool(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, KNOBS[name][0]).strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise KVarNConfigError(f"{name}={raw!r}: expected one of 1/0, true/false, yes/no, on/off")


@dataclass(frozen=True)
class KVarNConfig:
    sinkhorn_iters: int = 8
    split_k: bool = True
    num_splits: int = 0
    max_splits: int = 128
    fused_decode: bool = True

    def __post_init__(self) -> None:
        if self.sinkhorn_iters < 0:
            raise KVarNConfigError(f"KVARN_SINKHORN_ITERS={self.sinkhorn_iters}: must be >= 0")
        if self.max_splits < 1 or self.max_splits & (self.max_splits - 1):
            raise KVarNConfigError(
                f"KVARN_MAX_SPLITS={self.max_splits}: must be a power of two >= 1"
            )
        if not 0 <= self.num_splits <= self.max_splits:
            raise KVarNConfigError(
                f"KVARN_NUM_SPLITS={self.num_splits}: must be in [0, KVARN_MAX_SPLITS={self.max_splits}]"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> KVarNConfig:
        return cls(
            sinkhorn_iters=_int(env, "KVARN_SINKHORN_ITERS", 0, 1000),
            split_k=_bool(env, "KVARN_SPLIT_K"),
            num_splits=_int(env, "KVARN_NUM_SPLITS", 0, 1024),
            max_splits=_int(env, "KVARN_MAX_SPLITS", 1, 1024),
            fused_decode=_bool(env, "KVARN_FUSED_DECODE"),
        )

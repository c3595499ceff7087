"""A small decoder-only byte-level LM, trained here, for measuring what a KV codec costs in quality.

No model weights can be downloaded on these machines, so `quality.py` trains one on text every machine
has: the Python standard library's own sources (``*.py`` under ``sysconfig``'s ``stdlib``), split by
file into train and held-out parts with a fixed hash, read as bytes (vocabulary 256, no tokenizer).

The model has what makes real keys hard to quantize: RoPE (its low-frequency channel pairs carry
large, slowly turning values), grouped-query attention, RMSNorm and a SwiGLU MLP. Attention goes
through ``attend``, a function the caller may replace: that is where `quality.py` puts the KV codec.
"""

from __future__ import annotations

import math
import sysconfig
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

# attend(layer, q [B, Hq, T, D], k [B, Hkv, T, D], v [B, Hkv, T, D]) -> o [B, Hq, T, D]; k is post-RoPE,
# as a KV cache holds it.
Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class LMConfig:
    d_model: int = 768
    n_layers: int = 8
    n_heads: int = 6
    n_kv_heads: int = 2
    head_dim: int = 128
    mlp_hidden: int = 2048
    context: int = 4096
    rope_theta: float = 10000.0
    vocab: int = 256

    def params(self) -> int:
        attn = self.d_model * self.head_dim * (2 * self.n_heads + 2 * self.n_kv_heads)
        mlp = 3 * self.d_model * self.mlp_hidden
        return (
            self.n_layers * (attn + mlp + 2 * self.d_model)
            + self.vocab * self.d_model
            + self.d_model
        )


# The two models the table is measured on (head sizes 128 and 256), and the one CI trains on the CPU.
CONFIGS: dict[str, LMConfig] = {
    "d128": LMConfig(),
    "d256": LMConfig(n_heads=3, n_kv_heads=1, head_dim=256),
    "cpu-tiny": LMConfig(
        d_model=128, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=128, mlp_hidden=256, context=512
    ),
}


def sdpa_causal(_layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=k.shape[1] != q.shape[1]
    )


def _rope_tables(cfg: LMConfig, t: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / cfg.rope_theta ** (
        torch.arange(0, cfg.head_dim, 2, device=device).float() / cfg.head_dim
    )
    ang = torch.outer(torch.arange(t, device=device).float(), inv)  # [T, D/2]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos(), ang.sin()


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x.float() * cos + rot.float() * sin).to(x.dtype)


class Block(nn.Module):
    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.norm1 = nn.RMSNorm(cfg.d_model)
        self.norm2 = nn.RMSNorm(cfg.d_model)
        self.q = nn.Linear(cfg.d_model, cfg.n_heads * cfg.head_dim, bias=False)
        self.kv = nn.Linear(cfg.d_model, 2 * cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.o = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.d_model, bias=False)
        self.up = nn.Linear(cfg.d_model, 2 * cfg.mlp_hidden, bias=False)
        self.down = nn.Linear(cfg.mlp_hidden, cfg.d_model, bias=False)

    def forward(
        self, x: torch.Tensor, layer: int, cos: torch.Tensor, sin: torch.Tensor, attend: Attend
    ):
        b, t, _ = x.shape
        c = self.cfg
        h = self.norm1(x)
        q = self.q(h).view(b, t, c.n_heads, c.head_dim).transpose(1, 2)
        k, v = self.kv(h).view(b, t, 2, c.n_kv_heads, c.head_dim).permute(2, 0, 3, 1, 4)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        o = attend(layer, q, k, v).transpose(1, 2).reshape(b, t, c.n_heads * c.head_dim)
        x = x + self.o(o.to(x.dtype))
        gate, up = self.up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class LM(nn.Module):
    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.RMSNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = (
                    0.02 / math.sqrt(2 * cfg.n_layers)
                    if name.endswith(("o.weight", "down.weight"))
                    else 0.02
                )
                nn.init.normal_(p, std=std)

    def forward(self, idx: torch.Tensor, attend: Attend = sdpa_causal) -> torch.Tensor:
        cos, sin = _rope_tables(self.cfg, idx.shape[1], idx.device)
        x = self.embed(idx)
        for i, blk in enumerate(self.blocks):
            x = blk(x, i, cos, sin, attend)
        return self.head(self.norm(x))


# -- data --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Corpus:
    train: torch.Tensor  # uint8 [n]
    heldout: torch.Tensor  # uint8 [m]
    source: str  # what was read, for the results
    files: tuple[int, int]  # train files, held-out files


def source_roots(with_torch: bool = True) -> list[Path]:
    """The standard library's sources, and torch's own Python sources: both are on every machine
    that can run this benchmark (a Debian stdlib alone is ~10 MB, which a 50 M model memorizes)."""
    roots = [Path(sysconfig.get_paths()["stdlib"])]
    if with_torch:
        roots.append(Path(torch.__file__).parent)
    return roots


def stdlib_corpus(
    roots: list[Path] | None = None, heldout_every: int = 10, limit_bytes: int | None = None
) -> Corpus:
    """The ``*.py`` files under ``roots`` (tests, site-packages and idle excluded), sorted; a file is
    held out when crc32 of its path relative to its root is 0 mod ``heldout_every``. Files are
    joined with a NUL byte, which no source file contains."""
    roots = roots or source_roots()
    train: list[bytes] = []
    held: list[bytes] = []
    size = 0
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if (
                rel.startswith(("site-packages/", "dist-packages/", "test/", "idlelib/"))
                or "/test" in rel
            ):
                continue
            data = path.read_bytes()
            (held if zlib.crc32(rel.encode()) % heldout_every == 0 else train).append(data)
            size += len(data)
            if limit_bytes is not None and size >= limit_bytes:
                break
        if limit_bytes is not None and size >= limit_bytes:
            break
    if not train or not held:
        raise RuntimeError(
            f"{', '.join(map(str, roots))}: too few *.py files for a train/held-out split"
        )

    def join(parts: list[bytes]) -> torch.Tensor:
        return torch.frombuffer(bytearray(b"\0".join(parts)), dtype=torch.uint8)

    return Corpus(join(train), join(held), " + ".join(map(str, roots)), (len(train), len(held)))


def batches(data: torch.Tensor, batch: int, t: int, gen: torch.Generator):
    """Endless random windows [batch, t + 1] of ``data`` (on its device)."""
    n = data.numel() - t - 1
    offs = torch.arange(t + 1, device=data.device)
    while True:
        start = torch.randint(0, n, (batch,), generator=gen).to(data.device)
        yield data[start[:, None] + offs].long()


# -- training ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainResult:
    steps: int
    tokens: int
    seconds: float
    final_loss: float


def train(
    model: LM,
    corpus: Corpus,
    *,
    seconds: float,
    batch: int,
    lr: float = 1e-3,
    warmup: int = 50,
    max_steps: int | None = None,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> TrainResult:
    """AdamW on random windows for ``seconds`` of wall time (or ``max_steps``); the learning rate
    follows a cosine over the elapsed fraction of the budget, so the run ends annealed whatever the
    machine's speed."""
    dev = next(model.parameters()).device
    data = corpus.train.to(dev)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(
        model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1, fused=dev.type == "cuda"
    )
    amp = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda")
    t0 = time.perf_counter()
    step, loss_v = 0, float("nan")
    model.train()
    for xy in batches(data, batch, model.cfg.context, gen):
        frac = (time.perf_counter() - t0) / seconds
        if frac >= 1.0 or (max_steps is not None and step >= max_steps):
            break
        scale = min(1.0, (step + 1) / warmup) * (
            0.1 + 0.45 * (1 + math.cos(math.pi * min(frac, 1.0)))
        )
        for g in opt.param_groups:
            g["lr"] = lr * scale
        with amp:
            logits = model(xy[:, :-1])
            loss = F.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]), xy[:, 1:].reshape(-1)
            )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 100 == 0 or step == 1:
            loss_v = loss.detach().item()
            log(f"step {step}  loss {loss_v:.4f}  {time.perf_counter() - t0:.0f} s")
    loss_v = loss.detach().item()
    model.eval()
    return TrainResult(step, step * batch * model.cfg.context, time.perf_counter() - t0, loss_v)

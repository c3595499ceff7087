"""Multi-token queries over a cached prefix: the fused kernel (ops/kvarn/triton_prefix.py) against
the path it replaces and against fp16 SDPA on the same prefix, in one process on the same shapes.

For each (D, batch, context, query tokens) — 2-16 speculative tokens, prefill chunks of 512-2048:

- **one pass** and **dense**: ``kvarn_prefix_attention`` over a compressed cache (random codes,
  sane scales; each request's sink and the blocks of its query tokens in the fp16 pool, as the
  step leaves them), ``path="fused"`` (the one-pass kernel) and ``path="dense"`` (dequantize once,
  then SDPA); "auto" is the one ``FUSED_MAX_TOKENS`` picks;
- **gather**: what the backend did before, per request: ``reference.gather_kv`` (the prefix written
  out in fp32), then SDPA in the rotated basis (q·H in, o·H out), the causal mask as a boolean
  matrix, grouped-query heads (``enable_gqa``);
- **sdpa fp16**: SDPA on an fp16 cache ``[B, Hkv, L, D]`` of the same length, same mask and heads:
  attention with no compression at all.

All eager, under ``triton.testing.do_bench`` (median). Both KVarN outputs are compared with the
gather path's (cosine per row: the same data, other paths). Writes DIR/prefix.json and DIR/prefix.md.

    python3 gpu/kvarn/bench_prefix.py --out DIR [--contexts 8192,32768] [--dims 128,256]
"""

from __future__ import annotations

import argparse
import functools
import json
import os

import bench_decode  # also loads kvarn_ops (through _load)
import torch
import torch.nn.functional as F
import triton
from kvarn_ops import hadamard, layout, reference, triton_prefix

PRESET = "kvarn_k4v2_g128"
DEV = "cuda"


class PrefixCase:
    def __init__(self, b: int, ctx: int, q_len: int, d: int, hq: int, hkv: int) -> None:
        lay = layout.record_layout(PRESET, d)
        g = lay.group
        nb = -(-ctx // g)
        num_blocks = b * nb
        cache = bench_decode.random_records(num_blocks, hkv, lay)
        table = torch.randperm(num_blocks, device=DEV).to(torch.int32).view(b, nb)
        # In the pool: the sink and every block holding a query token (uncommitted).
        first_q_blk = (ctx - q_len) // g
        in_pool = sorted({0, *range(first_q_blk, nb)})
        slot = torch.full((num_blocks,), -1, dtype=torch.int32, device=DEV)
        n_slots = b * len(in_pool)
        ids = table[:, in_pool].reshape(-1).long()
        slot[ids] = torch.arange(n_slots, dtype=torch.int32, device=DEV)
        self.pool_k = torch.randn(n_slots, g, hkv, d, device=DEV).half()
        self.pool_v = torch.randn_like(self.pool_k)
        self.cache, self.table, self.slot, self.lay = cache, table, slot, lay
        self.seq = torch.full((b,), ctx, dtype=torch.int32, device=DEV)
        self.qsl = [i * q_len for i in range(b + 1)]
        self.qsl_dev = torch.tensor(self.qsl, dtype=torch.int32, device=DEV)
        self.q = torch.randn(b * q_len, hq, d, device=DEV).half()
        self.h16 = hadamard.hadamard(d, torch.float16, DEV)
        self.b, self.ctx, self.q_len, self.d, self.hq, self.hkv = b, ctx, q_len, d, hq, hkv
        self.scale = d**-0.5
        pos_q = torch.arange(ctx - q_len, ctx, device=DEV)[:, None]
        self.mask = torch.arange(ctx, device=DEV)[None, :] <= pos_q

    def kvarn(self, path: str) -> torch.Tensor:
        return triton_prefix.kvarn_prefix_attention(
            self.q,
            self.cache,
            self.pool_k,
            self.pool_v,
            self.slot,
            self.table,
            self.qsl_dev,
            self.seq,
            self.lay,
            self.h16,
            self.scale,
            query_start_loc_cpu=self.qsl,
            seq_lens_cpu=[self.ctx] * self.b,
            path=path,
        )

    def gather(self) -> torch.Tensor:
        h = self.h16.float()
        out = torch.empty(self.q.shape, dtype=torch.float32, device=DEV)
        nb = -(-self.ctx // self.lay.group)
        for i in range(self.b):
            lo, hi = self.qsl[i], self.qsl[i + 1]
            k, v = reference.gather_kv(
                self.cache, self.pool_k, self.pool_v, self.slot, self.table[i, :nb], self.lay
            )
            k, v = k[: self.ctx], v[: self.ctx]
            q = (self.q[lo:hi].float() @ h).half().transpose(0, 1)[None]
            o = F.scaled_dot_product_attention(
                q,
                k.half().transpose(0, 1)[None],
                v.half().transpose(0, 1)[None],
                attn_mask=self.mask,
                scale=self.scale,
                enable_gqa=True,
            )
            out[lo:hi] = o[0].transpose(0, 1).float() @ h
        return out

    def sdpa_fp16(self):
        k = torch.randn(self.b, self.hkv, self.ctx, self.d, device=DEV).half()
        v = torch.randn_like(k)
        q = self.q.view(self.b, self.q_len, self.hq, self.d).transpose(1, 2).contiguous()

        def run():
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=self.mask, scale=self.scale, enable_gqa=True
            )

        return run


def ms(fn) -> float:
    return triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--contexts", default="8192,32768")
    ap.add_argument("--dims", default="128,256")
    ap.add_argument("--q-lens", default="2,4,8,16,32,64,512,2048")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--hq", type=int, default=32)
    ap.add_argument("--hkv", type=int, default=8)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for d in map(int, args.dims.split(",")):
        for ctx in map(int, args.contexts.split(",")):
            for b in map(int, args.batches.split(",")):
                for q_len in map(int, args.q_lens.split(",")):
                    if q_len > 16 and b > 1:
                        continue  # chunks: one request (a step's token budget)
                    case = PrefixCase(b, ctx, q_len, d, args.hq, args.hkv)
                    want = case.gather()
                    row = {"d": d, "batch": b, "context": ctx, "q_len": q_len}
                    for path in ("fused", "dense"):
                        got = case.kvarn(path)
                        cos = F.cosine_similarity(got.flatten(1), want.flatten(1), dim=1)
                        row[f"{path}_min_cosine"] = cos.min().item()
                        row[f"{path}_ms"] = ms(functools.partial(case.kvarn, path))
                    row["gather_ms"] = ms(case.gather)
                    row["sdpa_fp16_ms"] = ms(case.sdpa_fp16())
                    pick = "fused" if q_len <= triton_prefix.FUSED_MAX_TOKENS else "dense"
                    row["auto"] = pick
                    row["auto_ms"] = row[f"{pick}_ms"]
                    row["vs_gather"] = row["gather_ms"] / row["auto_ms"]
                    row["vs_sdpa_fp16"] = row["sdpa_fp16_ms"] / row["auto_ms"]
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    del case
                    torch.cuda.empty_cache()
    meta = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "hq": args.hq,
        "hkv": args.hkv,
        "preset": PRESET,
    }
    with open(os.path.join(args.out, "prefix.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    lines = [
        f"{meta['device']}, torch {meta['torch']}, Triton {meta['triton']}; Hq {args.hq}, "
        f"Hkv {args.hkv}, {PRESET}; eager, median ms (do_bench)",
        "",
        "| D | batch | context | q tokens | one pass ms | dense ms | gather ms | fp16 SDPA ms "
        "| auto vs gather | auto vs fp16 SDPA | min cos |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cos = min(r["fused_min_cosine"], r["dense_min_cosine"])
        one, dense = f"{r['fused_ms']:.3f}", f"{r['dense_ms']:.3f}"
        one, dense = (f"**{one}**", dense) if r["auto"] == "fused" else (one, f"**{dense}**")
        lines.append(
            f"| {r['d']} | {r['batch']} | {r['context']} | {r['q_len']} | {one} | {dense} "
            f"| {r['gather_ms']:.3f} | {r['sdpa_fp16_ms']:.3f} | {r['vs_gather']:.1f}x "
            f"| {r['vs_sdpa_fp16']:.2f}x | {cos:.5f} |"
        )
    with open(os.path.join(args.out, "prefix.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

"""Compile a decode kernel offline for sm_90 (no GPU needed: Triton's bundled ptxas and cuobjdump)
and report registers, spills, shared memory and the instruction mix of each loop in the SASS.

    $(scripts/vllm-env) gpu/kvarn/sass_offline.py [--pkg DIR | --module PATH] [--d 128] [--qpk 4] [--warps 4]
        [--maxnreg N] [--split] [--dump FILE] [--set NAME=VALUE ...]

``--pkg`` names a copy of the package folder (an experiment built by experiments/build.sh) whose
kernel to compile, loaded as a package of its own, so its relative imports reach its own modules;
``--module`` names a file defining ``_kvarn_decode_kernel`` with the signature of the shipped one,
loaded inside the tree's package (its relative imports reach the tree's modules). Default: the
tree's kernel. ``--set`` overrides extra constexpr parameters by name.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"  # compile for real, even without a GPU
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _load  # noqa: E402
import triton  # noqa: E402
from kvarn_ops import layout  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

BIN = Path(triton.__file__).parent / "backends/nvidia/bin"


def load(path: str):
    spec = importlib.util.spec_from_file_location("kvarn_ops._offline", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def compile_kernel(
    mod,
    d: int,
    qpk: int,
    warps: int,
    maxnreg,
    split: bool,
    extra: dict,
    preset: str,
    q_dtype: str = "fp16",
):
    lay = layout.record_layout(preset, d)
    fn = mod._kvarn_decode_kernel
    consts = dict(
        QPK=qpk,
        QH=max(8, triton.next_power_of_2(qpk)),
        D=d,
        G=lay.group,
        VB=lay.preset.v_bits,
        K_CODES=lay.k_codes,
        K_SCOL=lay.k_scol,
        K_ZP=lay.k_zp,
        K_SROW=lay.k_srow,
        V_CODES=lay.v_codes,
        V_SCOL=lay.v_scol,
        V_SROW=lay.v_srow,
        V_ZP=lay.v_zp,
        IS_SPLIT=split,
        DEQ=2,
        PREFETCH=False,
        ROT_Q=False,
        L2PF=0,
        REC=lay.size,
    )
    consts.update(extra)
    ptr = {
        "q_ptr": f"*{q_dtype}" if consts["ROT_Q"] else "*fp32",  # ROT_Q: the caller's q
        "h_ptr": "*fp16",
        "cache_u8": "*u8",
        "cache_f16": "*fp16",
        "pool_k": "*fp16",
        "pool_v": "*fp16",
        "block_slot": "*i32",
        "block_table": "*i32",
        "seq_lens": "*i32",
        "comp_end": "*i32",
        "out_ptr": "*fp32",
        "lse_ptr": "*fp32",
    }
    sig = {}
    for name in fn.arg_names:
        if name in consts:
            sig[name] = "constexpr"
        elif name in ptr:
            sig[name] = ptr[name]
        elif name == "q_scale":
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    consts = {k: v for k, v in consts.items() if k in fn.arg_names}
    # As on the device: pointers 16-byte aligned, every specialized int a multiple of 16 (all strides
    # are, for D in {128, 256}); num_splits and s_bt are never specialized.
    div16 = [["tt.divisibility", 16]]
    attrs = {
        (i,): div16
        for i, n in enumerate(fn.arg_names)
        if sig[n] not in ("constexpr", "fp32") and n not in ("num_splits", "s_bt")
    }
    cidx = {(fn.arg_names.index(k),): v for k, v in consts.items()}
    src = ASTSource(fn, sig, constexprs=cidx, attrs=attrs)
    opts = {"num_warps": warps}
    if maxnreg:
        opts["maxnreg"] = maxnreg
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)


def sass_of(kernel) -> tuple[str, str]:
    """(SASS, resource usage line) of the kernel's cubin."""
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "k.cubin"
        p.write_bytes(kernel.asm["cubin"])
        out = []
        for flag in ("--dump-sass", "--dump-resource-usage"):
            cmd = [str(BIN / "cuobjdump"), flag, str(p)]
            out.append(subprocess.run(cmd, capture_output=True, text=True).stdout)
        return out[0], out[1]


LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")


def loops(sass: str):
    instrs = []
    for m in LINE.finditer(sass):
        instrs.append((int(m.group(1), 16), m.group(3), m.group(4)))
    out = []
    for addr, op, args in instrs:
        if op.startswith("BRA"):
            t = re.search(r"0x([0-9a-f]+)", args)
            if t and int(t.group(1), 16) <= addr:
                tgt = int(t.group(1), 16)
                body = [o for a, o, _ in instrs if tgt <= a <= addr]
                out.append((tgt, addr, body))
    return instrs, out


def mix(ops) -> str:
    c = collections.Counter(o.split(".")[0] for o in ops)
    keys = [
        "HMMA",
        "LDG",
        "LDS",
        "LDSM",
        "STS",
        "BAR",
        "SHFL",
        "PRMT",
        "LOP3",
        "SHF",
        "FFMA",
        "FMUL",
        "FADD",
        "MUFU",
        "F2F",
        "I2F",
        "HFMA2",
        "HMUL2",
        "FSETP",
        "FSEL",
        "LDL",
        "STL",
    ]
    return " ".join(f"{k}={c[k]}" for k in keys if c[k])


def main() -> None:
    ap = argparse.ArgumentParser()
    which = ap.add_mutually_exclusive_group()
    which.add_argument(
        "--module",
        default=str(_load.ROOT / "kvarn/files/vllm/v1/attention/ops/kvarn/triton_decode.py"),
    )
    which.add_argument("--pkg", default="", help="a copy of the package folder (build/v/NAME)")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--qpk", type=int, default=4)
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--maxnreg", type=int, default=0)
    ap.add_argument("--split", action="store_true")
    ap.add_argument("--preset", default="kvarn_k4v2_g128")
    ap.add_argument("--dump", default="")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--q", default="fp16", help="q's dtype where the kernel rotates it (ROT_Q=1)")
    a = ap.parse_args()
    extra = {}
    for s in a.set:
        k, v = s.split("=")
        extra[k] = int(v)
    if a.pkg:
        _load.conftest.load_package("kvarn_copy", Path(a.pkg).resolve())
        mod = importlib.import_module("kvarn_copy.triton_decode")
        a.module = str(Path(a.pkg) / "triton_decode.py")
    else:
        mod = load(a.module)
    k = compile_kernel(mod, a.d, a.qpk, a.warps, a.maxnreg or None, a.split, extra, a.preset, a.q)
    md = k.metadata
    sass, res = sass_of(k)
    usage = re.search(r"REG:\d+.*", res)
    if a.dump:
        Path(a.dump).write_text(sass)
    instrs, lps = loops(sass)
    print(
        f"{Path(a.module).name} D={a.d} qpk={a.qpk} warps={a.warps} maxnreg={a.maxnreg or '-'} "
        f"{extra}: {usage.group(0) if usage else '?'} shared={md.shared} "
        f"total_instr={len(instrs)}"
    )
    for tgt, end, body in sorted(lps, key=lambda x: -len(x[2]))[:3]:
        print(f"  loop {tgt:#x}-{end:#x}: {len(body)} instr; {mix(body)}")


if __name__ == "__main__":
    main()

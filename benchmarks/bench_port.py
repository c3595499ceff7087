"""Benchmark: a warm ``port`` of a 50-row series from vLLM 0.29.0 to the real 0.30.0, against a GNU
patch loop doing the same passes, side by side.

The series is generated (seeded) on the real 0.29.0 wheel's sources: 50 rows over 30 of its larger
modules, 1-3 hunks each, a line added after a ``def`` line; every fifth row edits a line an earlier row
added to the same file (layering), so some rows conflict on 0.30.0 only by cascade. 0.30.0's own
changes give the offsets and conflicts. Both wheels come from PyPI through the tool's cache (the first
run downloads them; nothing here is timed cold).

Per run:

- ours: ``hyperqwen-patches port --to 0.30.0 --json`` (one process: both pristine trees from the
  cache, every row tried alone and in sequence, forward and reverse, conflict causes and pristine
  diffs, the static name and signature checks on the target as the series leaves it);
- GNU: a ``bash`` loop over the rows running ``patch -p1 --fuzz 0`` for the same passes: alone on the
  0.30.0 tree forward and reverse (``--dry-run``), in sequence on a copy forward and reverse
  (``--dry-run``), then for real when the forward passes. The trees are extracted once and the copy
  made before each run, untimed. GNU does no static checks and no cause analysis: it is the floor.

Both sides' verdicts are compared per row (applies / reverse applies / neither, alone and in
sequence) before any figure is printed: a benchmark of a wrong answer measures nothing.

Run:  .venv/bin/python benchmarks/bench_port.py [--runs 5]
Not a timed test: the figures go into docs/performance.md ("## port").
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HQP = [str(Path(sys.executable).parent / "hyperqwen-patches")]
ROWS = 50
FILES = 30


def extract(tree: object, dest: Path) -> None:
    for path in tree.paths():  # type: ignore[attr-defined]
        target = dest / os.fsdecode(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(tree.read(path))  # type: ignore[attr-defined]


def unified(path: str, before: list[str], after: list[str]) -> str:
    body = "".join(difflib.unified_diff(before, after, f"a/{path}", f"b/{path}", n=3))
    return f"diff --git a/{path} b/{path}\n{body}"


def changed_lines(old: list[str], new: list[str]) -> set[int]:
    """0-based indexes of the old lines the new release replaced or deleted."""
    out: set[int] = set()
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, _, _ in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            out.update(range(i1, i2))
    return out


def make_series(old: object, new: object, root: Path, seed: int = 29) -> list[str]:
    """Write a series repository at ``root``; return the row names in order."""
    rng = random.Random(seed)
    candidates = sorted(
        p
        for p in old.paths()  # type: ignore[attr-defined]
        if p.startswith(b"vllm/") and p.endswith(b".py") and new.read(p) is not None  # type: ignore[attr-defined]
        and 400 < old.read(p).count(b"\n") < 3000  # type: ignore[attr-defined]
    )  # fmt: skip
    files = rng.sample(candidates, FILES)
    state = {p: old.read(p).decode().splitlines(keepends=True) for p in files}  # type: ignore[attr-defined]
    added: dict[bytes, list[int]] = {p: [] for p in files}  # line indexes our rows added
    (root / "patches").mkdir(parents=True)
    names, entries = [], []
    for i in range(1, ROWS + 1):
        path = (
            files[(i * 7) % FILES] if i % 5 else rng.choice([p for p in files if added[p]] or files)
        )
        before = state[path]
        after = list(before)
        if i % 5 == 0 and added[path]:
            at = rng.choice(added[path])
            after[at] = after[at].rstrip("\n") + f"  # revised by row {i}\n"
        else:
            defs = [k for k, line in enumerate(before) if line.lstrip().startswith("def ")]
            # The added call names module-level functions and classes of the file, so the static
            # checks resolve real names on both releases, as they do on a real series.
            defined = [m.group(1) for line in before
                     if (m := re.match(r"(?:def|class) (\w+)", line))] or ["None"]  # fmt: skip
            if i % 3 == 0:
                # A def the new release changed just below: the hunk's context is gone there.
                text = new.read(path).decode().splitlines(keepends=True)  # type: ignore[attr-defined]
                gone = changed_lines(before, text)
                near = [k for k in defs if gone & set(range(k - 2, k + 4))]
                defs = near[:1] or defs
            for k in sorted(rng.sample(defs, min(len(defs), rng.randint(1, 3))), reverse=True):
                indent = " " * (len(before[k]) - len(before[k].lstrip()) + 4)
                used = ", ".join(rng.sample(defined, min(2, len(defined))))
                after.insert(k + 1, f"{indent}_hqp_trace({i}, {used})  # row {i}\n")
                added[path] = [a + 1 if a > k else a for a in added[path]] + [k + 1]
        name = f"row-{i:02d}"
        text = unified(os.fsdecode(path), before, after)
        (root / "patches" / f"{name}.patch").write_text(text)
        state[path] = after
        names.append(name)
        entries.append(
            f"  - name: {name}\n    kind: fix\n    what: generated row {i}\n"
            f'    cut_against: "0.29.0"\n    retires_when: never\n'
            f"    patch: patches/{name}.patch\n"
        )
    (root / "patches/manifest.yaml").write_text(
        'format: 1\npin: "0.29.0"\npackage: vllm\nsource: pypi:vllm==0.29.0\nrows:\n'
        + "".join(entries)
    )
    return names


GNU_LOOP = r"""
set -u
new=$1; seq=$2; dir=$3; shift 3
for name in "$@"; do
  p="$dir/$name.patch"
  a=n; s=n
  if patch -p1 --fuzz 0 -s -f --dry-run -d "$new" < "$p" >/dev/null; then a=f
  elif patch -R -p1 --fuzz 0 -s -f --dry-run -d "$new" < "$p" >/dev/null; then a=r; fi
  if patch -p1 --fuzz 0 -s -f --dry-run -d "$seq" < "$p" >/dev/null; then
    s=f; patch -p1 --fuzz 0 -s -f -d "$seq" < "$p" >/dev/null
  elif patch -R -p1 --fuzz 0 -s -f --dry-run -d "$seq" < "$p" >/dev/null; then s=r; fi
  echo "$name $a $s"
done
"""


def verdict(status: str) -> str:
    return {"exact": "f", "offset": "f", "upstream": "r"}.get(status, "n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    from hyperqwen_patches.sources.pristine import open_pristine

    tmp = Path(tempfile.mkdtemp(prefix="hqp-bench-port-"))
    try:
        old = open_pristine("pypi:vllm==0.29.0", version="0.29.0")
        new = open_pristine("pypi:vllm==0.30.0", version="0.30.0")
        repo = tmp / "repo"
        names = make_series(old, new, repo)
        extract(new, tmp / "new")
        old.close()
        new.close()
        port = [*HQP, "port", "--to", "0.30.0", "--repo", str(repo), "--json"]
        warm = subprocess.run(port, capture_output=True, text=True, check=False)
        if warm.returncode not in (0, 1):
            print(warm.stderr, file=sys.stderr)
            return 2
        report = json.loads(warm.stdout)["reports"][0]
        ours = {
            r["name"]: (verdict(r["alone"]["status"]), verdict(r["in_sequence"]["status"]))
            for r in report["rows"]
        }
        times: dict[str, list[float]] = {"ours": [], "gnu": []}
        gnu_out = ""
        for run in range(args.runs):
            seq = tmp / "seq"
            shutil.rmtree(seq, ignore_errors=True)
            shutil.copytree(tmp / "new", seq)
            order = ("ours", "gnu") if run % 2 == 0 else ("gnu", "ours")
            for who in order:
                start = time.perf_counter()
                if who == "ours":
                    subprocess.run(port, capture_output=True, check=False)
                else:
                    gnu_out = subprocess.run(
                        ["bash", "-c", GNU_LOOP, "loop", str(tmp / "new"), str(seq),
                         str(repo / "patches"), *names],
                        capture_output=True, text=True, check=True,
                    ).stdout  # fmt: skip
                times[who].append(time.perf_counter() - start)
        gnu = {n: (a, s) for n, a, s in (line.split() for line in gnu_out.splitlines())}
        differ = [n for n in names if ours[n] != gnu[n]]
        counts = report["counts"]
        print(f"series: {ROWS} rows over {FILES} files of vllm 0.29.0 -> 0.30.0; ours: {counts}")
        print(
            "verdicts (alone, in sequence) agree with GNU patch on "
            f"{ROWS - len(differ)} of {ROWS} rows"
            + (
                f"; differ: {', '.join(f'{n} ours {ours[n]} gnu {gnu[n]}' for n in differ)}"
                if differ
                else ""
            )
        )
        o, g = statistics.median(times["ours"]), statistics.median(times["gnu"])
        print("| runs | ours port (median) | GNU loop (median) | GNU / ours |")
        print(f"| {args.runs} | {o:.2f} s | {g:.2f} s | {g / o:.2f}x |")
        print("all runs, s: ours", [round(t, 2) for t in times["ours"]],
              "gnu", [round(t, 2) for t in times["gnu"]])  # fmt: skip
        return 1 if differ else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: the engine against a loop of GNU patch over the same series, side by side in one run.

Generates (seeded) a 3,000-file tree and a series of 200 patches with about 2,000 hunks, made on the
evolving tree so they apply in order; then adds upstream drift (lines inserted near the top of a third of
the touched files) so many hunks land at an offset, as after a pin bump. Two copies of the tree are
patched: one by ``apply_to_tree`` (parse + place in memory + all-or-nothing write), one by
``patch -p1 --fuzz 0 --forward -i P`` run once per patch. Both results must be byte-identical.

Run:  .venv/bin/python benchmarks/bench_engine.py [--seed 1] [--files 3000] [--patches 200]
Not a timed test: the figures go into docs/performance.md ("## Engine").
"""

from __future__ import annotations

import argparse
import difflib
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hyperqwen_patches.engine.applying import Policy, apply_series
from hyperqwen_patches.engine.patchscan import parse_patch
from hyperqwen_patches.sources.tree import Tree

VOCAB = [
    b"import os",
    b"",
    b"    return None",
    b"    pass",
    b"def helper(x):",
    b"class Worker:",
    b"    def __init__(self):",
    b"        self.value = 0",
    b"# comment",
    b"    if x is None:",
]


def make_file(rng: random.Random, index: int) -> bytes:
    lines: list[bytes] = []
    for i in range(rng.randint(60, 400)):
        if rng.random() < 0.35:
            lines.append(rng.choice(VOCAB))  # repeated lines, as real code has
        else:
            lines.append(b"value_%d_%d = compute(%d)" % (index, i, rng.randint(0, 9999)))
    return b"\n".join(lines) + b"\n"


def edit(rng: random.Random, content: bytes, hunks: int, tag: int) -> bytes:
    lines = content.split(b"\n")[:-1]
    # Edits spaced out so each becomes its own hunk at 3 lines of context.
    # Not in the first or last 10 lines: a hunk there is anchored to the file's edge (GNU rules) and
    # the drift below would make it fail for both tools.
    positions = sorted(rng.sample(range(10, len(lines) - 10), min(hunks, len(lines) // 10 or 1)))
    for n, pos in enumerate(reversed(positions)):
        kind = rng.random()
        new = [b"patched_%d_%d = True" % (tag, n)]
        if kind < 0.4:
            lines[pos : pos + 1] = new
        elif kind < 0.8:
            lines[pos:pos] = [*new, b"    # patched"]
        else:
            del lines[pos]
    return b"\n".join(lines) + b"\n"


def unified(path: str, old: bytes, new: bytes) -> bytes:
    diff = difflib.diff_bytes(
        difflib.unified_diff,
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{path}".encode(),
        tofile=f"b/{path}".encode(),
        n=3,
    )
    return b"".join(line if line.endswith(b"\n") else line + b"\n" for line in diff)


def generate(
    root: Path, seed: int, files: int, patches: int, hunks_per_patch: int
) -> tuple[list[bytes], int]:
    rng = random.Random(seed)
    names = [f"vllm/pkg{i % 40}/mod{i}.py" for i in range(files)]
    state: dict[str, bytes] = {}
    for index, name in enumerate(names):
        state[name] = make_file(rng, index)
    pristine = dict(state)
    series: list[bytes] = []
    total_hunks = 0
    for tag in range(patches):
        chosen = rng.sample(names, rng.randint(1, 4))
        parts: list[bytes] = []
        per_file = max(1, hunks_per_patch // len(chosen))
        for name in sorted(chosen):
            new = edit(rng, state[name], per_file, tag)
            diff = unified(name, state[name], new)
            if diff:
                parts.append(diff)
                total_hunks += diff.count(b"\n@@ ")
                state[name] = new
        series.append(
            b"From: bench <bench@example.invalid>\nSubject: [PATCH] bench %d\n\n---\n" % tag
            + b"".join(parts)
        )
    # Upstream drift: lines inserted after line 5 of a third of the touched files, so hunks land at an
    # offset (and the offset carries forward within each file), as after a pin bump.
    touched = sorted({n for n in names if state[n] != pristine[n]})
    for name in rng.sample(touched, len(touched) // 3):
        head, _, tail = pristine[name].partition(
            b"\n".join(pristine[name].split(b"\n")[:5]) + b"\n"
        )
        assert not head
        first = pristine[name][: len(pristine[name]) - len(tail)]
        pristine[name] = first + b"# upstream drift\n" * rng.randint(1, 20) + tail
    for name, content in pristine.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return series, total_hunks


def cpu_now() -> float:
    """CPU seconds (user + system) of this process and of its waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith((".orig", ".rej"))
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--patches", type=int, default=200)
    parser.add_argument("--hunks-per-patch", type=int, default=13)
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs for each side")
    args = parser.parse_args()
    gnu = shutil.which("patch")
    if gnu is None:
        print("GNU patch is required (apt-get install patch)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="hqp-bench-") as tmp:
        base = Path(tmp) / "base"
        texts, hunks = generate(base, args.seed, args.files, args.patches, args.hunks_per_patch)
        patch_files = []
        for i, data in enumerate(texts):
            path = Path(tmp) / f"{i:04d}.patch"
            path.write_bytes(data)
            patch_files.append(path)
        tree_files = sum(1 for p in base.rglob("*") if p.is_file())
        print(
            f"tree: {tree_files} files; series: {len(texts)} patches, {hunks} hunks (seed {args.seed})"
        )

        env = {**os.environ, "LC_ALL": "C"}
        # Wall time on a shared machine swings with its load, so CPU time (user + system, our process
        # and, for GNU patch, its children) is measured beside it and is the figure to compare.
        cpu: dict[str, list[float]] = {"memory": [], "engine": [], "gnu": []}
        memory_times: list[float] = []  # parse + place, in memory (the engine proper)
        engine_times: list[float] = []  # parse + place + all-or-nothing write (apply_to_tree)
        gnu_times: list[float] = []
        reads = 0
        offsets = 0
        # Interleaved runs, so both sides see the same machine load and disk state.
        for run in range(args.repeat):
            target = Path(tmp) / f"engine{run}"
            shutil.copytree(base, target, symlinks=True)
            os.sync()  # both sides start from a quiet disk, not behind the copy's writeback
            tree = Tree(target)
            start, cpu_start = time.perf_counter(), cpu_now()
            patches = [parse_patch(p.read_bytes(), name=p.name) for p in patch_files]
            series = apply_series(patches, tree.read, Policy())
            memory_times.append(time.perf_counter() - start)
            cpu["memory"].append(cpu_now() - cpu_start)
            if not series.ok:
                print("engine: the series did not apply", file=sys.stderr)
                return 1
            tree.write(series.changes, series.modes)
            engine_times.append(time.perf_counter() - start)
            cpu["engine"].append(cpu_now() - cpu_start)
            reads = len(set(tree.reads))
            offsets = series.hunk_totals["offset"]

            target = Path(tmp) / f"gnu{run}"
            shutil.copytree(base, target, symlinks=True)
            os.sync()  # both sides start from a quiet disk, not behind the copy's writeback
            start, cpu_start = time.perf_counter(), cpu_now()
            for path in patch_files:
                proc = subprocess.run(
                    [gnu, "-p1", "--fuzz", "0", "--forward", "-s", "-i", str(path)],
                    cwd=target,
                    env=env,
                    capture_output=True,
                    check=False,
                )
                if proc.returncode != 0:
                    print(f"GNU patch failed on {path.name}: {proc.stdout!r}", file=sys.stderr)
                    return 1
            gnu_times.append(time.perf_counter() - start)
            cpu["gnu"].append(cpu_now() - cpu_start)

        same = snapshot(Path(tmp) / "engine0") == snapshot(Path(tmp) / "gnu0")
        best = {k: min(v) * 1000 for k, v in cpu.items()}
        wall = {
            "memory": min(memory_times) * 1000,
            "engine": min(engine_times) * 1000,
            "gnu": min(gnu_times) * 1000,
        }
        print(f"best of {args.repeat}, interleaved        CPU ms    wall ms")
        print(f"engine, in memory (parse + place)  {best['memory']:8.1f}  {wall['memory']:8.1f}")
        print(f"engine + all-or-nothing write       {best['engine']:8.1f}  {wall['engine']:8.1f}")
        print(f"GNU patch loop ({len(texts)} runs)        {best['gnu']:8.1f}  {wall['gnu']:8.1f}")
        print(
            f"speedup (CPU): {best['gnu'] / best['memory']:.1f}x in memory, "
            f"{best['gnu'] / best['engine']:.1f}x with the write; "
            f"(wall): {wall['gnu'] / wall['memory']:.1f}x, {wall['gnu'] / wall['engine']:.1f}x"
        )
        print(f"hunks at an offset: {offsets}; files read by the engine: {reads} of {tree_files}")
        print(f"results byte-identical to GNU patch: {same}")
        return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark: two versions of ``apply`` and the GNU patch loop, side by side, on one tree.

Where ``bench_peers.py`` copies the whole pristine tree before every run (minutes of disk work at
30,000 files, and noise of its own), this one keeps one copy and puts back, between runs, only the
files the series touches (from the pristine tree, then ``sync``): cheap enough for many rounds, so a
change of a few milliseconds shows. Each side is a whole process: ``python -m hyperqwen_patches
apply COPY --repo REPO`` with ``PYTHONPATH`` set to a source tree (``--src NAME=DIR``, repeatable:
the tree's ``src`` and, say, a ``git archive`` of an older commit's), and the GNU loop of
``bench_peers.py``. Sides rotate each round; round 0 is untimed.

Run:  .venv/bin/python benchmarks/bench_ab.py --size 50x30000 --rounds 11 \\
          --src new=src --src old=/tmp/old/src

(``git archive HEAD~1 src | tar -x -C /tmp/old`` makes the old tree; compile it with
``python -m compileall -q /tmp/old/src`` so neither side pays for compiling.) Not a timed test:
figures go into docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_check import setup_synth

LOOP = 'set -e; cd "$1"; shift; for p in "$@"; do patch -p1 --fuzz 0 -s -i "$p"; done'


def touched(patches: list[Path]) -> set[str]:
    """The files the series writes (its ``+++ b/`` paths; the synthetic series adds no file)."""
    out = set()
    for p in patches:
        for line in p.read_bytes().splitlines():
            if line.startswith(b"+++ b/"):
                out.add(line[6:].decode())
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--size", default="50x30000", help="PATCHESxFILES")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--src", action="append", required=True, metavar="NAME=DIR")
    args = parser.parse_args()
    srcs = dict(s.split("=", 1) for s in args.src)
    patches_n, files_n = (int(x) for x in args.size.split("x"))
    work = Path(tempfile.mkdtemp(prefix="hqp-bench-ab-"))
    try:
        wdir = work / f"synth-{patches_n}-{files_n}"
        wdir.mkdir()
        w = setup_synth(wdir, patches_n, files_n, args.seed, source="wheel")
        pristine = work / f"tree-{files_n}-{args.seed}"
        site = work / "copy"
        shutil.copytree(pristine, site, symlinks=True)
        patches = [p for kind, p in w.steps if kind == "patch"]
        names = sorted(touched(patches))
        env = {**os.environ, **w.env}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode written, as on a user's machine
        sides: dict[str, tuple[list[str], dict[str, str]]] = {
            name: (
                [
                    sys.executable,
                    "-m",
                    "hyperqwen_patches",
                    "apply",
                    str(site),
                    "--repo",
                    str(w.repo),
                ],
                {**env, "PYTHONPATH": str(Path(src).resolve())},
            )
            for name, src in srcs.items()
        }
        sides["GNU loop"] = (["bash", "-c", LOOP, "loop", str(site), *map(str, patches)], env)
        times: dict[str, list[float]] = {name: [] for name in sides}
        want = None
        for r in range(args.rounds + 1):
            order = list(sides)
            order = order[r % len(order) :] + order[: r % len(order)]
            for name in order:
                for rel in names:
                    shutil.copy2(pristine / rel, site / rel)
                os.sync()
                argv, side_env = sides[name]
                start = time.perf_counter()
                subprocess.run(argv, env=side_env, check=True, stdout=subprocess.DEVNULL)
                wall = time.perf_counter() - start
                got = [(site / rel).read_bytes() for rel in names]
                if want is None:
                    want = got
                elif got != want:
                    raise SystemExit(
                        f"{name} wrote other bytes than the first side; nothing measured"
                    )
                if r:
                    times[name].append(wall)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{w.name}: {args.rounds} rounds (medians, min-max); machine: {os.cpu_count()} cores\n")
    print("| side | median | min | max |\n| --- | ---: | ---: | ---: |")
    for name, v in times.items():
        print(f"| {name} | {statistics.median(v) * 1000:.1f} ms | {min(v) * 1000:.1f} ms "
              f"| {max(v) * 1000:.1f} ms |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``Tree.write`` alone, in process: the journal, the temporaries, the renames, nothing else.

100 files of 80 lines in 10 directories three levels down, read first (as ``apply`` reads them), then
written with one line added; put back and ``sync`` between writes. Prints the median and minimum of
the wall and CPU time (all threads) per write. Run it once per source tree, alternating, to compare
two versions of the writer:

    PYTHONPATH=/tmp/old/src HQP_CACHE=/tmp/c .venv/bin/python benchmarks/bench_tree_write.py 40 old
    PYTHONPATH=src HQP_CACHE=/tmp/c .venv/bin/python benchmarks/bench_tree_write.py 40 new

Not a timed test: figures go into docs/performance.md.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hyperqwen_patches.sources.tree import Tree


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    label = sys.argv[2] if len(sys.argv) > 2 else "tree.write"
    base = Path(tempfile.mkdtemp(prefix="hqp-bench-write-"))
    try:
        root = base / "site"
        original: dict[bytes, bytes] = {}
        for d in range(10):
            for i in range(10):
                rel = f"vllm/pkg{d}/sub/m{i}.py"
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                data = b"".join(b"line %d of %s\n" % (k, rel.encode()) for k in range(80))
                (root / rel).write_bytes(data)
                original[rel.encode()] = data
        changes: dict[bytes, bytes | None] = {k: v + b"# patched\n" for k, v in original.items()}
        wall: list[float] = []
        cpu: list[float] = []
        for _ in range(rounds):
            for rel, data in original.items():
                (root / rel.decode()).write_bytes(data)
            os.sync()
            tree = Tree(root)
            for rel in original:
                tree.read(rel)
            c, w = time.process_time(), time.perf_counter()
            tree.write(changes)
            wall.append(time.perf_counter() - w)
            cpu.append(time.process_time() - c)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(
        f"{label}: wall median {statistics.median(wall) * 1e3:.2f} ms, min {min(wall) * 1e3:.2f} ms;"
        f" cpu median {statistics.median(cpu) * 1e3:.2f} ms, min {min(cpu) * 1e3:.2f} ms;"
        f" {rounds} writes"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark: placing N hunks in one file of repeated lines (the engine alone, in memory).

Each hunk's context is three ``    pass`` lines either side of a unique line, so a scan for the
preimage's longest line visits every block of the file: placement was quadratic in the hunks (2,000
took 52 s in an independent check) until a file with many hunks is searched through its line index
(``engine.placement.FileLines(indexed=True)``). Prints seconds per N; the figures are in
docs/performance.md ("Many hunks in one file").

Run:  .venv/bin/python benchmarks/bench_many_hunks.py [N ...]   (default 1000 2000 10000)
"""

from __future__ import annotations

import sys
import time

from hyperqwen_patches.engine.applying import apply_series
from hyperqwen_patches.engine.patchscan import parse_patch


def workload(n: int) -> tuple[bytes, bytes]:
    block = b"    pass\n" * 3
    content = b"".join(block + b"x = %d\n" % i + block for i in range(n))
    hunks = b"".join(
        b"@@ -%d,7 +%d,7 @@\n" % (i * 7 + 1, i * 7 + 1)
        + b"     pass\n" * 3
        + b"-x = %d\n+x = %d0\n" % (i, i)
        + b"     pass\n" * 3
        for i in range(n)
    )
    return content, b"--- a/f\n+++ b/f\n" + hunks


def main() -> None:
    for n in [int(a) for a in sys.argv[1:]] or [1000, 2000, 10000]:
        content, data = workload(n)
        patch = parse_patch(data, name="many.patch")
        start = time.perf_counter()
        result = apply_series([patch], {b"f": content}.get)
        elapsed = time.perf_counter() - start
        assert result.ok
        print(f"{n:>6} hunks: {elapsed:.3f} s")


if __name__ == "__main__":
    main()

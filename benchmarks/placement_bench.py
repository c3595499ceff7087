"""Benchmark: N hunks over highly repeated lines, our engine beside GNU patch 2.7.6, in one run.

The file is ``pass`` lines with a few other repeated lines mixed in (seeded), so every hunk's
preimage matches at many places: ambiguity reporting used to list every other match for every hunk
(O(N^2): 2,000 hunks took 15-28 s and 1.6 GB, 10,000 were killed at 23 GB). Some hunks are stated a
few lines off (offsets, GNU's tie-break between equally near matches) and a few do not match
anywhere ("FAILED at"), so the comparison covers placement, not only the happy path.

Each side runs in its own process (``/usr/bin/time``-style numbers from ``os.wait4``): ours is
``python -c`` running ``apply_series`` on the bytes (parse, place, apply; no tree write), GNU's is
``patch -p1 --fuzz 0 --forward`` in a temporary directory. Prints wall seconds and peak RSS of each
and whether they agree: the resulting file's bytes (or both refusing), every ``Hunk #N succeeded at
L (offset K lines)`` and ``Hunk #N FAILED at L`` line.

Run:  .venv/bin/python benchmarks/placement_bench.py [N ...]   (default 2000 10000; --seed S)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BLOCK = 10  # input lines per hunk
FILLER = (b"    pass\n", b"    pass\n", b"    pass\n", b"\n", b"    return None\n")


def workload(n: int, seed: int, *, failing: int = 5) -> tuple[bytes, bytes]:
    """(file, patch): ``n`` hunks, one per block of ``BLOCK`` repeated lines.

    Hunk i rewrites the middle line of block i; its preimage (3 lines of context, the line, 3 lines)
    is made of repeated lines only, so it matches in many blocks. One hunk in 7 is stated 1-2 lines
    off; ``failing`` hunks expect a line that is nowhere in the file.
    """
    rng = random.Random(seed)
    lines = [rng.choice(FILLER) for _ in range(n * BLOCK)]
    bad = set(rng.sample(range(n), min(failing, n)))
    hunks: list[bytes] = []
    out_offset = 0
    for i in range(n):
        start = i * BLOCK + 2  # 1-based first preimage line
        pre = lines[start - 1 : start + 6]
        mid = pre[3]
        if i in bad:
            mid = b"    not in the file\n"
        stated = start + (rng.choice((-2, -1, 1, 2)) if i % 7 == 3 else 0)
        body = b"".join(b" " + x for x in pre[:3])
        body += b"-" + mid + b"+    changed(%d)\n" % i
        body += b"".join(b" " + x for x in pre[4:])
        hunks.append(b"@@ -%d,7 +%d,7 @@\n" % (stated, stated + out_offset) + body)
    return b"".join(lines), b"--- a/f\n+++ b/f\n" + b"".join(hunks)


ENGINE = r"""
import json, sys
from hyperqwen_patches.engine import apply_series, parse_patch
content = open(sys.argv[1], "rb").read()
patch = parse_patch(open(sys.argv[2], "rb").read(), name="bench.patch")
result = apply_series([patch], {b"f": content}.get)
messages = [h.gnu_message() for f in result.patches[0].files for h in f.hunks]
if result.ok:
    open(sys.argv[3], "wb").write(result.changes[b"f"])
json.dump({"ok": result.ok, "messages": [m for m in messages if m]}, sys.stdout)
"""


def measured(argv: list[str], cwd: Path) -> tuple[float, int, bytes, int]:
    """(wall seconds, peak RSS in MB, stdout, exit code) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return elapsed, usage.ru_maxrss // 1024, out, proc.returncode


def one(n: int, seed: int, gnu: str, work: Path) -> dict[str, object]:
    content, patch = workload(n, seed)
    run = work / str(n)
    (run / "tree").mkdir(parents=True)
    (run / "f").write_bytes(content)
    (run / "tree" / "f").write_bytes(content)
    (run / "p.patch").write_bytes(patch)
    ours = [sys.executable, "-c", ENGINE, str(run / "f"), str(run / "p.patch"), str(run / "out")]
    o_wall, o_rss, o_out, o_rc = measured(ours, run)
    if o_rc != 0:
        raise SystemExit(o_out.decode(errors="replace"))
    report = json.loads(o_out)
    argv = [gnu, "-p1", "--fuzz", "0", "--forward", "--no-backup-if-mismatch", "-r", "-"]
    g_wall, g_rss, g_out, g_rc = measured([*argv, "-i", str(run / "p.patch")], run / "tree")
    gnu_messages = re.findall(r"^Hunk #\d+ .*\.$", g_out.decode("latin-1"), re.M)
    # GNU writes the hunks that applied; we write nothing unless all did: compare trees on success.
    if report["ok"]:
        same_tree = g_rc == 0 and (run / "out").read_bytes() == (run / "tree" / "f").read_bytes()
    else:
        same_tree = g_rc == 1
    return {
        "n": n,
        "ours": (o_wall, o_rss),
        "gnu": (g_wall, g_rss),
        "messages": report["messages"] == gnu_messages,
        "count": len(gnu_messages),
        "tree": same_tree,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="*", type=int, default=[2000, 10000])
    parser.add_argument("--seed", type=int, default=43)
    args = parser.parse_args()
    gnu = shutil.which("patch")
    if gnu is None:
        raise SystemExit("GNU patch is not on PATH")
    print("| hunks | ours s | ours MB | GNU s | GNU MB | ratio | messages agree | result agrees |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    with tempfile.TemporaryDirectory(prefix="hqp-placement-") as tmp:
        for n in args.n:
            r = one(n, args.seed, gnu, Path(tmp))
            (ow, orss), (gw, grss) = r["ours"], r["gnu"]  # type: ignore[misc]
            print(
                f"| {n} | {ow:.2f} | {orss} | {gw:.2f} | {grss} | {ow / gw:.1f}x "
                f"| {'yes' if r['messages'] else 'NO'} ({r['count']} lines) "
                f"| {'yes' if r['tree'] else 'NO'} |"
            )


if __name__ == "__main__":
    main()

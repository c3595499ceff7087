"""Benchmark: ``check`` on a manifest of many rows (up to 200,000), to show the work grows linearly.

The workload: a ``dir:`` release of 2,000 files (``vllm/m<f>.py``, 60 unique lines each) and N rows,
row i appending one line to file i mod 2,000 (its context is the three lines before it, from the
pristine file or from the rows before: a layered series, as long series are). One export point and no
fork, so the fork checks report "not verified". ``render`` runs once first (untimed) so PATCHES.md and
patches/series are what ``check`` expects; then ``check`` runs twice: the first run parses the manifest
(and caches its model), the second reads the model back. Each run's wall time and peak RSS are
printed with the time per row; every run must end with exit 0.

Run:  .venv/bin/python benchmarks/bench_many_rows.py --rows 1000,10000,50000,200000
Not a timed test: the figures go into docs/performance.md ("## Many rows").
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FILES = 2000
LINES = 60


def write_workload(root: Path, rows: int) -> Path:
    pristine = root / "pristine"
    (pristine / "vllm").mkdir(parents=True)
    lines: list[list[bytes]] = []
    for f in range(FILES):
        body = [b"value_%d_%d = %d" % (f, i, i) for i in range(LINES)]
        lines.append(body)
        (pristine / "vllm" / f"m{f}.py").write_bytes(b"\n".join(body) + b"\n")
    repo = root / "repo"
    (repo / "patches").mkdir(parents=True)
    (repo / "docker").mkdir()
    (repo / "docker/requirements.txt").write_text("vllm==1.0.0\n")
    names = []
    for i in range(rows):
        f = i % FILES
        body = lines[f]
        n = len(body)
        added = b"row_%d = %d" % (i, i)
        path = f"vllm/m{f}.py"
        hunk = [
            b"--- a/" + path.encode(),
            b"+++ b/" + path.encode(),
            b"@@ -%d,3 +%d,4 @@" % (n - 2, n - 2),
            *(b" " + x for x in body[-3:]),
            b"+" + added,
        ]
        body.append(added)
        name = f"r{i:06d}"
        names.append(name)
        (repo / "patches" / f"{name}.patch").write_bytes(b"\n".join(hunk) + b"\n")
    out = [
        "format: 1", 'pin: "1.0.0"', "package: vllm", f"source: dir:{pristine}", "paths: root",
        "export_points:", "  - name: main", "    branch: main", "rows:",
    ]  # fmt: skip
    for name in names:
        out += [
            f"  - name: {name}", f"    patch: patches/{name}.patch", "    kind: local",
            f'    what: "row {name}"', '    cut_against: "1.0.0"', "    retires_when: never",
            "    export_point: main",
        ]  # fmt: skip
    out.append("retirements: []")
    (repo / "patches/manifest.yaml").write_text("\n".join(out) + "\n")
    return repo


def run(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Wall seconds, peak RSS in MB of the child, exit code."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = proc.communicate()
    wall = time.perf_counter() - start
    # The largest child so far (sizes run in increasing order, so it is this one or a bigger run).
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    if proc.returncode != 0:
        sys.stderr.write(err.decode()[-3000:])
    return wall, rss, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", default="1000,10000,50000")
    a = ap.parse_args()
    hqp = [sys.executable, "-m", "hyperqwen_patches"]
    print(
        "| rows | write workload | render | check, first | check, second | per row (second) | peak RSS |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in (int(x) for x in a.rows.split(",")):
        work = Path(tempfile.mkdtemp(prefix=f"hqp-rows-{n}-"))
        try:
            env = {**os.environ, "HQP_CACHE": str(work / "cache")}
            t0 = time.perf_counter()
            repo = write_workload(work, n)
            t_write = time.perf_counter() - t0
            t_render, _, rc = run([*hqp, "render", "--repo", str(repo)], env)
            assert rc == 0
            first, _, rc1 = run([*hqp, "check", "--repo", str(repo)], env)
            second, rss, rc2 = run([*hqp, "check", "--repo", str(repo)], env)
            assert rc1 == rc2 == 0, (rc1, rc2)
            print(
                f"| {n:,} | {t_write:.1f} s | {t_render:.1f} s | {first:.1f} s | {second:.1f} s | "
                f"{second / n * 1000:.2f} ms | {rss:.0f} MB |",
                flush=True,
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

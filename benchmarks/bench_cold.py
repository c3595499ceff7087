"""Benchmark: a cold ``check`` of the shipped series, without the download, side by side with a
revision from before.

"Cold" is an empty cache: the wheel is indexed (its members verified against RECORD), the base
commit is built, the bundle fetched. The download is taken out by serving the wheel from a local
find-links directory (``PIP_NO_INDEX=1``, ``PIP_FIND_LINKS``), filled once from the wheel already in
your cache (``$HQP_CACHE/pypi/vllm-0.29.0-wheel``; run ``./hqp check`` once first). Each run gets a new
empty ``HQP_CACHE``; runs alternate between the two revisions. Wall time around the process; peak
memory is GNU time's ``%M`` (the largest resident set of the process tree, pip and git included).

``--before REV`` runs that revision's package from a ``git worktree`` (``PYTHONPATH=src``), in this
repository's venv.

Run:  .venv/bin/python benchmarks/bench_cold.py [--runs 3] [--before 33e7d7a]
Not a timed test: the figures go into docs/performance.md ("## Cold check").
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

REPO = Path(__file__).resolve().parent.parent
WHEEL = "vllm-0.29.0-cp38-abi3-manylinux_2_28_x86_64.whl"


def cache_root() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("HQP_CACHE") or Path(xdg) / "hyperqwen-patches")


def run_cold(label: str, cwd: Path, env: dict[str, str], work: Path) -> tuple[float, int]:
    cache = work / f"cache-{label}"
    shutil.rmtree(cache, ignore_errors=True)
    rss = work / "rss"
    argv = ["/usr/bin/time", "-q", "-f", "%M", "-o", str(rss), sys.executable, "-m",
            "hyperqwen_patches", "check"]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env={**env, "HQP_CACHE": str(cache)}, capture_output=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{label}: check exited {proc.returncode}\n{proc.stderr.decode()[-2000:]}")
    shutil.rmtree(cache, ignore_errors=True)
    return wall, int(rss.read_text().split()[-1]) // 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", help="a revision to run side by side (e.g. 33e7d7a)")
    args = parser.parse_args()
    wheel = cache_root() / "pypi/vllm-0.29.0-wheel" / WHEEL
    if not wheel.is_file():
        raise SystemExit(f"{wheel} is not there: run ./hqp check once first")
    work = Path(tempfile.mkdtemp(prefix="hqp-bench-cold-"))
    try:
        links = work / "links"
        links.mkdir()
        try:
            os.link(wheel, links / WHEEL)  # no 316 MB copy where the cache is on the same disk
        except OSError:
            shutil.copy(wheel, links / WHEEL)
        base_env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(links)}
        sides: dict[str, tuple[Path, dict[str, str]]] = {"now": (REPO, base_env)}
        if args.before:
            tree = work / "before"
            subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), args.before],
                           cwd=REPO, check=True)  # fmt: skip
            sides[f"before ({args.before})"] = (tree, {**base_env, "PYTHONPATH": str(tree / "src")})
        results: dict[str, list[tuple[float, int]]] = {k: [] for k in sides}
        for i in range(args.runs):
            order = list(sides) if i % 2 == 0 else list(reversed(sides))
            for label in order:
                cwd, env = sides[label]
                results[label].append(run_cold(label.split()[0], cwd, env, work))
                print(
                    f"{label}: {results[label][-1][0]:.1f} s, {results[label][-1][1]} MB",
                    file=sys.stderr,
                )
        print(f"runs: {args.runs} per side (medians; alternating)\n")
        print("| code | wall median (s) | min-max (s) | peak RSS median (MB) | max (MB) |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for label, got in results.items():
            walls, mems = [g[0] for g in got], [g[1] for g in got]
            print(f"| {label} | {statistics.median(walls):.1f} | {min(walls):.1f}-{max(walls):.1f} "
                  f"| {statistics.median(mems):.0f} | {max(mems)} |")  # fmt: skip
    finally:
        if args.before:
            subprocess.run(["git", "worktree", "remove", "--force", str(work / "before")], cwd=REPO)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark: one ``apply`` of the realistic 52-file series against a GNU patch loop, side by side.

The workload is ``tests/realseries.py`` (seeded): a synthetic release of about 60 files and the series
a shell-script project keeps on it (48 series files, 4 more from a second list, a module directory),
adopted once, untimed, with ``hyperqwen-patches adopt``.

Per run, on a fresh copy of the extracted release (the copy is not timed):

- ours: ``hyperqwen-patches apply COPY --repo PROJECT`` (one process: interpreter start, parsing the
  manifest and every patch, placing every hunk in memory, writing the files);
- GNU: one ``bash`` loop as the project's scripts run it: ``patch -p1 --fuzz 0 -s`` per series file in
  order, then ``cp -r`` of the module directory.

Both trees are compared byte for byte after every run (a benchmark of a wrong result measures
nothing). Runs are interleaved, the first of each pair alternating, so machine load hits both alike.
A second table times the re-apply (``apply`` on the patched tree: a no-op) and ``--check-applied``,
which have no GNU counterpart (GNU's ``--forward`` fails on a layered series).

Run:  .venv/bin/python benchmarks/bench_realseries.py [--runs 7]
Not a timed test: the figures go into docs/performance.md ("## A real-shaped series").
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from realseries import RUNTIME_KNOBS, write_project  # noqa: E402

# The console script, as a user runs it (``python -m`` adds runpy and importlib.util, ~5 ms).
HQP = [str(Path(sys.executable).parent / "hyperqwen-patches")]


def timed(argv: list[str], cwd: Path | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def same(a: Path, b: Path) -> bool:
    c = filecmp.dircmp(a, b)
    stack = [c]
    while stack:
        d = stack.pop()
        if d.left_only or d.right_only:
            return False
        for name in d.common_files:
            if (Path(d.left) / name).read_bytes() != (Path(d.right) / name).read_bytes():
                return False
        stack += d.subdirs.values()
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hqp-bench-real-"))
    try:
        project = write_project(work)
        knobs = [x for k in RUNTIME_KNOBS for x in ("--runtime-knob", f"{k}: runtime only")]
        subprocess.run(
            [*HQP, "adopt", "patches/series", "--append", "kvarn/apply-order", "--modules",
             "kvarn/modules", *knobs],
            cwd=project.root, check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        loop = (
            'set -e; cd "$1/vllm"; P="$2"; '
            'for f in $(grep -v "^#" "$P/patches/series.orig" | grep .); do '
            'patch -p1 --fuzz 0 -s --no-backup-if-mismatch < "$P/patches/$f"; done; '
            'for f in $(grep -v "^#" "$P/kvarn/apply-order" | grep .); do '
            'patch -p1 --fuzz 0 -s --no-backup-if-mismatch < "$P/kvarn/$f"; done; '
            'cp -r "$P/kvarn/modules/." .'
        )
        # The project's own series file, as its scripts read it (adopt rendered patches/series anew).
        original = [f.split("/", 1)[1] for f in project.series_files if f.startswith("patches/")]
        (project.root / "patches/series.orig").write_text("\n".join(original) + "\n")
        hunks = sum(
            (project.root / f).read_text("utf-8").count("\n@@ ") for f in project.series_files
        )
        ours_t: list[float] = []
        gnu_t: list[float] = []
        for i in range(args.runs + 1):  # run 0 warms both (page cache, bytecode), untimed
            a, b = work / f"ours{i}", work / f"gnu{i}"
            shutil.copytree(project.pristine, a)
            shutil.copytree(project.pristine, b)
            pair = [
                ("ours", lambda a=a: timed([*HQP, "apply", str(a), "--repo", str(project.root)])),
                ("gnu", lambda b=b: timed(["bash", "-c", loop, "loop", str(b), str(project.root)])),
            ]
            if i % 2:
                pair.reverse()
            results = {name: run() for name, run in pair}
            if not same(a, b):
                raise SystemExit(f"run {i}: the two trees differ; nothing measured")
            if i:
                ours_t.append(results["ours"])
                gnu_t.append(results["gnu"])
        site = work / "ours1"
        again = [
            timed([*HQP, "apply", str(site), "--repo", str(project.root)]) for _ in range(args.runs)
        ]
        verify = [
            timed([*HQP, "apply", str(site), "--repo", str(project.root), "--check-applied"])
            for _ in range(args.runs)
        ]
        om, gm = statistics.median(ours_t), statistics.median(gnu_t)
        print(f"series: {len(project.series_files)} patch files, {hunks} hunks, 1 module directory")
        print(f"runs: {args.runs} (medians; interleaved)\n")
        print("| step | hyperqwen-patches | GNU patch loop | ratio |")
        print("| --- | ---: | ---: | ---: |")
        print(
            f"| apply onto the release | {om * 1000:.0f} ms | {gm * 1000:.0f} ms | {gm / om:.2f}x |"
        )
        print(f"| apply again (no-op) | {statistics.median(again) * 1000:.0f} ms | fails | - |")
        print(f"| --check-applied | {statistics.median(verify) * 1000:.0f} ms | - | - |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

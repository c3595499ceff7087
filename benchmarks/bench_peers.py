"""Benchmark: ``apply`` and ``check`` against ``git apply`` and a GNU patch loop, side by side in one run.

Per workload (``synth-P-F``: P synthetic patches over an F-file tree, built by ``bench_check.py``'s
setup: a wheel on a local index named ``pypi:vllm==1.0.0``, a manifest, a fork and its bundle), every
timed run starts from a fresh copy of the pristine tree (the copy is not timed) and runs, as whole
processes:

- ``ours apply``: ``hyperqwen-patches apply COPY --repo REPO`` (parse the manifest and every patch,
  place every hunk, write the files all or nothing);
- ``git apply``: ``git apply --cached P1 ... Pn`` over a temporary index of the pristine tree (read
  untimed), then ``git write-tree``: git's fastest way to the patched tree, the peer the issue names.
  It runs in a repository that holds the pristine tree only, with an empty object directory of its
  own each run, so it writes every blob it makes, as ours and GNU write every file;
- ``git apply, blobs present``: the same in the fork, whose object store already holds every blob the
  series produces, so git writes nothing but the index and trees (shown for completeness: it is not
  the same work);
- ``GNU loop``: ``patch -p1 --fuzz 0 -s -i P`` per patch in one ``bash`` loop, in the copy;
- ``ours check``: ``hyperqwen-patches check --repo REPO`` (every check: replay identity against the
  bundle included), which has no peer; its ratio is taken against ``git apply``.

Trees are compared after each run: ours and GNU's byte for byte, and git's tree id against the fork's
tip (a benchmark of a wrong result measures nothing). Runs are interleaved (the order rotates each
round) so machine load hits every side alike; each command runs once untimed first (warm caches).

Run:  .venv/bin/python benchmarks/bench_peers.py [--runs 5] [--sizes 50x3000,200x3000,...]
Not a timed test: the figures go into docs/performance.md ("## Against git apply").
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_check
from bench_check import Workload, git_env, run, setup_synth, tool
from bench_realseries import same as same_tree

DEFAULT_SIZES = "50x3000,200x3000,1000x3000,50x30000,200x30000,1000x30000"


def timed(argv: list[str], *, cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(
            f"{shlex.join(argv)} exited {proc.returncode}\n{proc.stderr.decode(errors='replace')[-2000:]}"
        )
    return wall


def measure(w: Workload, tree: Path, runs: int, scratch: Path) -> dict[str, list[float]]:
    env = {**git_env(), **w.env}
    patches = [str(p) for kind, p in w.steps if kind == "patch"]
    loop = 'set -e; cd "$1"; shift; for p in "$@"; do patch -p1 --fuzz 0 -s -i "$p"; done'
    # git's side gets a repository holding the pristine tree only (not the fork, whose object store
    # already holds every blob the series produces, so git would write nothing), and a fresh object
    # directory per run on top of it: git writes the blobs it makes, as ours and GNU write files.
    base_git = scratch / "base.git"
    if not base_git.exists():
        run(["git", "init", "-q", "--bare", str(base_git)], cwd=scratch)
        add_env = {**env, "GIT_DIR": str(base_git), "GIT_WORK_TREE": str(tree),
                   "GIT_INDEX_FILE": str(scratch / "base.index")}  # fmt: skip
        run(["git", "add", "-A"], cwd=tree, env=add_env)
        run(["git", "write-tree"], cwd=tree, env=add_env)
    base_tree = run(["git", "rev-parse", f"{w.base}^{{tree}}"], cwd=w.fork).decode().strip()
    tip_tree = run(["git", "rev-parse", f"{w.tip}^{{tree}}"], cwd=w.fork).decode().strip()
    times: dict[str, list[float]] = {
        "ours apply": [],
        "git apply": [],
        "GNU loop": [],
        "ours check": [],
    }

    def ours_apply(i: int) -> float:
        return timed(
            tool("apply", str(scratch / f"ours{i}"), "--repo", str(w.repo)), cwd=scratch, env=env
        )

    def gnu(i: int) -> float:
        return timed(
            ["bash", "-c", loop, "loop", str(scratch / f"gnu{i}"), *patches], cwd=scratch, env=env
        )

    def git_in_fork(i: int) -> float:
        genv = {**env, "GIT_INDEX_FILE": str(scratch / f"findex{i}")}
        run(["git", "read-tree", w.base], cwd=w.fork, env=genv)
        start = time.perf_counter()
        subprocess.run(["git", "apply", "--cached", *patches], cwd=w.fork, env=genv, check=True)
        out = subprocess.run(["git", "write-tree"], cwd=w.fork, env=genv, check=True,
                             capture_output=True).stdout.decode().strip()  # fmt: skip
        wall = time.perf_counter() - start
        if out != tip_tree:
            raise SystemExit(f"{w.name}: git apply's tree {out} is not the fork tip's {tip_tree}")
        return wall

    def git(i: int) -> float:
        objects = scratch / f"objects{i}"
        shutil.rmtree(objects, ignore_errors=True)
        objects.mkdir()
        genv = {**env, "GIT_DIR": str(base_git), "GIT_INDEX_FILE": str(scratch / f"index{i}"),
                "GIT_OBJECT_DIRECTORY": str(objects),
                "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(base_git / "objects")}  # fmt: skip
        run(["git", "read-tree", base_tree], cwd=scratch, env=genv)
        start = time.perf_counter()
        subprocess.run(["git", "apply", "--cached", *patches], cwd=scratch, env=genv, check=True)
        out = subprocess.run(["git", "write-tree"], cwd=scratch, env=genv, check=True,
                             capture_output=True).stdout.decode().strip()  # fmt: skip
        wall = time.perf_counter() - start
        shutil.rmtree(objects)
        if out != tip_tree:
            raise SystemExit(f"{w.name}: git apply's tree {out} is not the fork tip's {tip_tree}")
        return wall

    def check(i: int) -> float:
        return timed(tool("check", "--repo", str(w.repo)), cwd=w.repo, env=env)

    sides = {"ours apply": ours_apply, "git apply": git, "git apply, blobs present": git_in_fork,
             "GNU loop": gnu, "ours check": check}  # fmt: skip
    times.update({name: [] for name in sides})
    for i in range(runs + 1):  # round 0 warms every side, untimed
        for name in ("ours", "gnu"):
            shutil.rmtree(scratch / f"{name}{i}", ignore_errors=True)
            shutil.copytree(tree, scratch / f"{name}{i}", symlinks=True)
        os.sync()
        order = list(sides)
        order = order[i % len(order) :] + order[: i % len(order)]
        got = {name: sides[name](i) for name in order}
        if not same_tree(scratch / f"ours{i}", scratch / f"gnu{i}"):
            raise SystemExit(
                f"{w.name} run {i}: ours and GNU patch's trees differ; nothing measured"
            )
        for name in ("ours", "gnu"):
            shutil.rmtree(scratch / f"{name}{i}")
        if i:
            for name, wall in got.items():
                times[name].append(wall)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="PATCHESxFILES, comma-separated")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hqp-bench-peers-"))
    rows = []
    try:
        for size in args.sizes.split(","):
            patches, files = (int(x) for x in size.split("x"))
            wdir = work / f"synth-{patches}-{files}"
            wdir.mkdir()
            w = setup_synth(wdir, patches, files, args.seed, source="wheel")
            tree = work / f"tree-{files}-{args.seed}"
            times = measure(w, tree, args.runs, wdir)
            med = {k: statistics.median(v) for k, v in times.items()}
            rows.append((w.name, med))
            print(
                f"{w.name}: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in med.items()),
                file=sys.stderr,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"runs: {args.runs} per side (medians, interleaved); machine: {os.cpu_count()} cores\n")
    print("| workload | ours apply | git apply --cached + write-tree | the same, blobs present "
          "| GNU loop | ours check | apply vs git | apply vs GNU | check / git |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, m in rows:
        a, g, f, n, c = (m[k] for k in ("ours apply", "git apply", "git apply, blobs present",
                                        "GNU loop", "ours check"))  # fmt: skip
        print(f"| {name} | {a * 1000:.0f} ms | {g * 1000:.0f} ms | {f * 1000:.0f} ms "
              f"| {n * 1000:.0f} ms | {c * 1000:.0f} ms | {g / a:.2f}x | {n / a:.2f}x | {c / g:.2f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    bench_check.TOOL = Path(sys.executable).parent / "hyperqwen-patches"
    raise SystemExit(main())

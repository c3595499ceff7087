"""Benchmark: ``check`` and ``export --check`` against the shell-script workflow, side by side in one run.

Baseline, as the shell scripts do it (one bash process per run, its git and patch children included):

- check: a scratch ``git worktree`` of the fork at the pristine base commit, ``patch -p1 --forward
  --fuzz 0`` for each row in series order (a module-file row is a ``cp -r`` of its directory), ``git add
  -A``, ``git diff --cached --name-only <fork tip>`` (which must print nothing), then the worktree is
  removed;
- export: one ``git format-patch -1 --stdout`` per commit of ``base..tip`` into a scratch directory.

Ours, as whole processes (interpreter start included): ``hyperqwen-patches check`` in the repository
(every invariant; replay identity per step and at the tip against ``patches/fork.bundle``), and
``hyperqwen-patches export --fork FORK --check``. Every pipeline entry runs; a run that does not exit 0
stops the benchmark (a benchmark of a failing check measures nothing).

Workloads:

- ``shipped``: the series of this repository on vLLM 0.29.0 from PyPI (warm cache). When the manifest
  names no export point or there is no ``patches/fork.bundle``, a copy of the repository gets one
  export point, ``import`` builds the fork and ``export --bundle`` records it (what a maintainer does).
- ``synth-P-F``: P synthetic patches over a synthetic F-file tree (``synth.py``, seeded), packed as a
  wheel on a local find-links index and given to check as ``pypi:vllm==1.0.0``, as the shipped series
  names its release (the wheel is fetched into the benchmark's own cache once, untimed), with a
  manifest, a fork (``import``) and its bundle (``export --bundle``) made by the benchmark in the same
  way. ``synth-P-F-dir``: the same, with the tree given as ``dir:PATH`` (a mutable source: every run
  stats its files to know whether the cached base commit still holds).

Each process runs under GNU ``/usr/bin/time``: wall time is measured around it, peak memory is time's
``%M`` (the largest resident set of any process of the tree: the process itself or any child it waited
for, from wait4's ``ru_maxrss``). Before the timed
runs each command runs once untimed (warm caches, base commit built). Runs are interleaved (ours,
baseline, ours, ...; the first of each pair alternates) so machine load hits both sides alike, and the
workloads take turns (round i of every workload, then round i + 1), so the 3,000- and 30,000-file
figures of the same series, compared in the closing table, see the same load.

Run:  .venv/bin/python benchmarks/bench_check.py [--runs 5] [--seed 1] [--workloads shipped,synth-50-3000,...]
Not a timed test: the figures go into docs/performance.md ("## check and export").
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import synth

REPO = Path(__file__).resolve().parent.parent
TOOL = Path(sys.executable).parent / "hyperqwen-patches"
DEFAULT_WORKLOADS = (
    "shipped",
    "synth-50-3000",
    "synth-200-3000",
    "synth-1000-3000",
    "synth-50-30000",
    "synth-200-30000",
    "synth-1000-30000",
)
# What the shipped series' repository is copied from (tracked files only).
SHIPPED_PATHS = ("patches", "kvarn", "docker/requirements.txt", "PATCHES.md")
BRANCH = "hqp/bench"


def git_env() -> dict[str, str]:
    """The baseline's git runs without the user's config (as a CI job would), in the C locale."""
    return {
        **os.environ,
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_AUTHOR_NAME": "bench",
        "GIT_AUTHOR_EMAIL": "bench@example.invalid",
        "GIT_COMMITTER_NAME": "bench",
        "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    }


@dataclass
class Sample:
    wall: float  # seconds
    rss_kb: int  # ru_maxrss of the process tree's largest process
    code: int
    stdout: bytes
    stderr: bytes


TIME = "/usr/bin/time"


def measure(argv: Sequence[str], *, cwd: Path, env: dict[str, str]) -> Sample:
    """Run ``argv`` under GNU time: wall time around it, peak RSS from time's ``%M``.

    Not ``os.wait4`` on a child of this process: Linux counts the pre-exec copy of the parent's memory
    into the child's ``ru_maxrss``, so every command would report at least this benchmark's own size
    (the synthetic trees it generated). GNU time is a small process; its child's figure is its own.
    """
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as errf,
        tempfile.NamedTemporaryFile("r") as rss,
    ):
        start = time.perf_counter()
        code = subprocess.call(
            [TIME, "-q", "-f", "%M", "-o", rss.name, *argv],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=errf,
        )
        wall = time.perf_counter() - start
        out.seek(0)
        errf.seek(0)
        return Sample(wall, int(rss.read().split()[-1]), code, out.read(), errf.read())


def run(argv: Sequence[str], *, cwd: Path, env: dict[str, str] | None = None) -> bytes:
    """A setup step: must succeed; its output is returned."""
    proc = subprocess.run(
        list(argv), cwd=cwd, env=env or git_env(), capture_output=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(
            f"setup step failed ({proc.returncode}): {shlex.join(argv)}\n"
            f"{proc.stdout.decode(errors='replace')[-3000:]}{proc.stderr.decode(errors='replace')[-3000:]}"
        )
    return proc.stdout


@dataclass
class Workload:
    name: str
    repo: Path  # the directory holding patches/manifest.yaml
    fork: Path  # a non-bare fork repository (import built it)
    base: str
    tip: str
    steps: list[tuple[str, Path]]  # ("patch", file) | ("copy", directory), in series order
    description: str
    env: dict[str, str] = field(default_factory=dict)  # added to every command's environment
    results: dict[str, list[Sample]] = field(default_factory=dict)


def tool(*args: str) -> list[str]:
    return [str(TOOL), *args]


def finish_fork(
    repo: Path, work: Path, *, bundle: bool = True, env: dict[str, str] | None = None
) -> tuple[Path, str, str]:
    """import (the fork) and, with ``bundle``, export --bundle (manifest SHAs, canonical files, the
    bundle); return (fork, base, tip) of the manifest's first export point."""
    from hyperqwen_patches.series.manifest import load_manifest

    fork = work / "fork"
    tool_env = {**git_env(), **(env or {})}
    run(
        tool("import", "--repo", str(repo), "--into", str(fork), "--create"), cwd=work, env=tool_env
    )
    if bundle:
        run(
            tool("export", "--repo", str(repo), "--fork", str(fork), "--bundle"),
            cwd=work,
            env=tool_env,
        )
    branch = load_manifest(repo).export_points[0].branch
    tip = run(["git", "rev-parse", f"refs/heads/{branch}"], cwd=fork).decode().strip()
    base = run(["git", "rev-list", "--max-parents=0", tip], cwd=fork).decode().split()[0]
    return fork, base, tip


def series_steps(repo: Path) -> list[tuple[str, Path]]:
    """The baseline's steps from the manifest, in row order (skipped rows left out)."""
    from hyperqwen_patches.series.manifest import load_manifest

    manifest = load_manifest(repo)
    steps: list[tuple[str, Path]] = []
    for row in manifest.active_rows:
        if row.is_module:
            steps.append(("copy", repo / row.source_path))
        else:
            steps.append(("patch", repo / row.source_path))
    return steps


def setup_shipped(work: Path) -> Workload:
    repo = work / "repo"
    listed = run(["git", "ls-files", "-z", "--", *SHIPPED_PATHS], cwd=REPO).split(b"\0")
    for rel in filter(None, listed):
        src = REPO / os.fsdecode(rel)
        dst = repo / os.fsdecode(rel)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    manifest = repo / "patches/manifest.yaml"
    text = manifest.read_text()
    no_points = re.search(r"^export_points:\s*\[\]\s*$", text, re.M) is not None
    if no_points:
        text = re.sub(
            r"^export_points:\s*\[\]\s*$",
            f"export_points:\n  - name: main\n    branch: {BRANCH}",
            text,
            flags=re.M,
        )
        manifest.write_text(text)
    # A shipped bundle (with the manifest's export points) is what check reads, as shipped; the baseline
    # and export --check still need a fork with a work tree, which import builds from the same series
    # (the same SHAs by construction). Without one, export --bundle records the imported fork.
    shipped = (repo / "patches/fork.bundle").is_file() and not no_points
    if not shipped:
        (repo / "patches/fork.bundle").unlink(missing_ok=True)
    fork, base, tip = finish_fork(repo, work, bundle=not shipped)
    files = len(run(["git", "ls-tree", "-r", "--name-only", base], cwd=fork).splitlines())
    steps = series_steps(repo)
    return Workload(
        "shipped",
        repo,
        fork,
        base,
        tip,
        steps,
        f"the shipped series ({len(steps)} rows) on vllm 0.29.0 (pypi, {files} files), "
        + ("the shipped bundle" if shipped else "bundle made by import + export --bundle"),
    )


def setup_synth(work: Path, patches: int, files: int, seed: int, *, source: str) -> Workload:
    """P patches over an F-file tree. ``source`` ``wheel``: the tree packed as a wheel on a local
    find-links index, named ``pypi:vllm==1.0.0`` (immutable, verified once: the shipped series' kind);
    ``dir``: the directory itself (``dir:``, which a run must stat in full to trust its cached base)."""
    # The tree depends on (files, seed) only: workloads of the same size share it (and its cached base).
    tree = work.parent / f"tree-{files}-{seed}"
    if tree.exists():
        contents = synth.read_tree(tree, files=files)
    else:
        contents = synth.write_tree(tree, files=files, seed=seed)
    if source == "wheel":
        links = work.parent / f"index-{files}-{seed}"
        if not links.exists():
            synth.write_wheel(links, contents, version="1.0.0")
        # One cache per tree: the release's cache entry and base commit are keyed by name and version.
        env = {
            "HQP_CACHE": str(work.parent / f"cache-wheel-{files}-{seed}"),
            "PIP_FIND_LINKS": str(links),
            "PIP_NO_INDEX": "1",
        }
        spec = "pypi:vllm==1.0.0"
    else:
        env = {"HQP_CACHE": str(work.parent / "cache")}
        spec = f"dir:{tree}"
    series = synth.make_series(contents, patches=patches, seed=seed)
    repo = work / "repo"
    (repo / "patches").mkdir(parents=True)
    (repo / "docker").mkdir()
    (repo / "docker/requirements.txt").write_text("vllm==1.0.0\n")
    names = [f"s{i:04d}" for i in range(patches)]
    for name, data in zip(names, series.patches, strict=True):
        (repo / f"patches/{name}.patch").write_bytes(data)
    (repo / "patches/manifest.yaml").write_text(
        synth.manifest_text(pin="1.0.0", source=spec, rows=names, branch=BRANCH)
    )
    run(tool("render", "--repo", str(repo)), cwd=work, env={**git_env(), **env})
    fork, base, tip = finish_fork(repo, work, env=env)
    return Workload(
        f"synth-{patches}-{files}" + ("-dir" if source == "dir" else ""),
        repo,
        fork,
        base,
        tip,
        series_steps(repo),
        f"{patches} patches ({series.hunks} hunks, {series.touched} files touched) over {files} files "
        f"(seed {seed}), as {'a wheel (pypi:vllm==1.0.0 from a local index)' if source == 'wheel' else 'dir:'}",
        env=env,
    )


def baseline_check_script(w: Workload, scratch: Path) -> str:
    wt = scratch / "wt"
    lines = [
        "set -e",
        f"git -C {shlex.quote(str(w.fork))} worktree add --quiet --detach {shlex.quote(str(wt))} {w.base}",
        f"cd {shlex.quote(str(wt))}",
    ]
    for kind, path in w.steps:
        if kind == "copy":
            lines.append(f"cp -r {shlex.quote(str(path))}/. .")
        else:
            lines.append(f"patch -p1 --forward --fuzz 0 -s -i {shlex.quote(str(path))}")
    lines += [
        "git add -A",
        f"out=$(git diff --cached --name-only {w.tip})",
        "cd /",
        f"git -C {shlex.quote(str(w.fork))} worktree remove --force {shlex.quote(str(wt))}",
        'if [ -n "$out" ]; then echo "differs: $out"; exit 1; fi',
    ]
    return "\n".join(lines) + "\n"


def baseline_export_script(w: Workload, scratch: Path) -> str:
    out = scratch / "export"
    return (
        "\n".join(
            [
                "set -e",
                f"mkdir -p {shlex.quote(str(out))}",
                f"cd {shlex.quote(str(w.fork))}",
                "n=0",
                f"for sha in $(git rev-list --reverse {w.base}..{w.tip}); do",
                "  n=$((n + 1))",
                f'  git format-patch -1 --stdout "$sha" > {shlex.quote(str(out))}/$n.patch',
                "done",
            ]
        )
        + "\n"
    )


Command = tuple[list[str], Path, dict[str, str]]  # argv, cwd, environment


def commands(w: Workload, scratch: Path, before: Path | None) -> dict[str, Command]:
    (scratch / "check.sh").write_text(baseline_check_script(w, scratch))
    (scratch / "export.sh").write_text(baseline_export_script(w, scratch))
    # The synthetic trees' caches live and die with the benchmark's directory (the shipped series
    # uses the user's warm cache: its wheel and base commit).
    env = {**git_env(), **w.env}
    cmds: dict[str, Command] = {
        "check": (tool("check"), w.repo, env),
        "baseline check": (["bash", str(scratch / "check.sh")], scratch, env),
        "export --check": (tool("export", "--fork", str(w.fork), "--check"), w.repo, env),
        "baseline export": (["bash", str(scratch / "export.sh")], scratch, env),
    }
    if before is not None:
        # The same commands run by the package's sources at another revision (PYTHONPATH comes before
        # the venv's editable path), for before/after figures.
        old = {**env, "PYTHONPATH": str(before)}
        python = [sys.executable, "-m", "hyperqwen_patches"]
        cmds["check (before)"] = ([*python, "check"], w.repo, old)
        cmds["export --check (before)"] = (
            [*python, "export", "--fork", str(w.fork), "--check"],
            w.repo,
            old,
        )
    return cmds


GROUPS = (
    ("check", "baseline check", "check (before)"),
    ("export --check", "baseline export", "export --check (before)"),
)


def warm_up(w: Workload, scratch: Path, before: Path | None) -> dict[str, Command]:
    """Run each command once, untimed (caches filled, base commit built); each one must pass."""
    cmds = commands(w, scratch, before)
    for name, (argv, cwd, env) in cmds.items():
        sample = measure(argv, cwd=cwd, env=env)
        if sample.code != 0:
            raise SystemExit(
                f"{w.name}: {name} exited {sample.code}\n{sample.stdout.decode(errors='replace')[-4000:]}"
                f"{sample.stderr.decode(errors='replace')[-4000:]}"
            )
        shutil.rmtree(scratch / "export", ignore_errors=True)
    w.results = {name: [] for name in cmds}
    return cmds


def timed_round(w: Workload, cmds: dict[str, Command], i: int, scratch: Path) -> None:
    for group in GROUPS:
        names = [n for n in group if n in cmds]
        # The first of each group rotates, so a warmer or quieter moment favours no side.
        for name in names[i % len(names) :] + names[: i % len(names)]:
            argv, cwd, env = cmds[name]
            sample = measure(argv, cwd=cwd, env=env)
            if sample.code != 0:
                raise SystemExit(f"{w.name}: {name} exited {sample.code} in run {i + 1}")
            w.results[name].append(sample)
            shutil.rmtree(scratch / "export", ignore_errors=True)


def fmt(samples: list[Sample]) -> tuple[str, str, str, float]:
    walls = [s.wall for s in samples]
    med = statistics.median(walls)
    return (
        f"{med:.2f}",
        f"{min(walls):.2f}–{max(walls):.2f}",
        f"{max(s.rss_kb for s in samples) / 1024:.0f}",
        med,
    )


def table(workloads: list[Workload]) -> str:
    before = any("check (before)" in w.results for w in workloads)
    head = (
        "| workload | command | wall median (s) | min–max (s) | peak RSS (MB) | baseline median (s) "
        "| baseline min–max (s) | baseline peak RSS (MB) | speedup |"
        + (" before: median (s) | before: peak RSS (MB) |" if before else "")
        + "\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        + (" ---: | ---: |" if before else "")
        + "\n"
    )
    rows = []
    for w in workloads:
        for ours, theirs, old in GROUPS:
            o = fmt(w.results[ours])
            t = fmt(w.results[theirs])
            row = (
                f"| {w.name} | `{ours}` | {o[0]} | {o[1]} | {o[2]} | {t[0]} | {t[1]} | {t[2]} "
                f"| {t[3] / o[3]:.1f}x |"
            )
            if before:
                b = fmt(w.results[old]) if old in w.results else ("", "", "", 0.0)
                row += f" {b[0]} | {b[2]} |"
            rows.append(row)
    return head + "\n".join(rows) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each command (median)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS))
    parser.add_argument("--keep", type=Path, help="build the workloads here and keep them")
    parser.add_argument(
        "--before",
        metavar="REV",
        help="also run check and export --check from the package's sources at REV (before/after)",
    )
    args = parser.parse_args()
    for program in ("git", "patch", "bash", TIME):
        if shutil.which(program) is None:
            print(f"{program} is required", file=sys.stderr)
            return 2
    if not TOOL.exists():
        print(f"{TOOL} not found: run with the project's venv python", file=sys.stderr)
        return 2
    top = args.keep or Path(tempfile.mkdtemp(prefix="hqp-bench-check-"))
    before: Path | None = None
    if args.before:
        # The package's sources at REV, from git objects (nothing in the working tree changes).
        archive = run(["git", "archive", "--format=tar", args.before, "src"], cwd=REPO)
        (top / "before").mkdir(parents=True, exist_ok=True)
        subprocess.run(["tar", "-x", "-C", str(top / "before")], input=archive, check=True)
        before = top / "before" / "src"
    load_before = os.getloadavg()
    done: list[Workload] = []
    ready: list[tuple[Workload, dict[str, Command], Path]] = []
    try:
        for name in args.workloads.split(","):
            work = top / name
            if work.exists():
                shutil.rmtree(work)
            work.mkdir(parents=True)
            t0 = time.perf_counter()
            if name == "shipped":
                w = setup_shipped(work)
            else:
                m = re.fullmatch(r"synth-(\d+)-(\d+)(-dir)?", name)
                if m is None:
                    print(f"unknown workload {name!r}", file=sys.stderr)
                    return 2
                source = "dir" if m[3] else "wheel"
                w = setup_synth(work, int(m[1]), int(m[2]), args.seed, source=source)
            scratch = work / "scratch"
            scratch.mkdir()
            ready.append((w, warm_up(w, scratch, before), scratch))
            print(
                f"{w.name}: {w.description}; set up and warmed in {time.perf_counter() - t0:.0f} s",
                flush=True,
            )
        # Round-robin over the workloads as well as within them: a change of load during the run
        # hits every workload alike, so the 3,000- and 30,000-file figures compare fairly.
        for i in range(args.runs):
            for w, cmds, scratch in ready:
                timed_round(w, cmds, i, scratch)
            print(f"round {i + 1} of {args.runs} done", flush=True)
        done = [w for w, _, _ in ready]
    finally:
        if args.keep is None:
            shutil.rmtree(top, ignore_errors=True)
    load_after = os.getloadavg()
    print()
    print(
        f"machine: nproc {os.cpu_count()}, load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after; {args.runs} timed runs each, interleaved"
    )
    for w in done:
        print(f"- {w.name}: {w.description}")
    print()
    print(table(done))
    scaling = scaling_table(done)
    if scaling:
        print(scaling)
    return 0


def scaling_table(workloads: list[Workload]) -> str:
    """``check`` at 3,000 against 30,000 files for each series measured at both sizes."""
    by = {w.name: w for w in workloads}
    rows = []
    for w in workloads:
        m = re.fullmatch(r"synth-(\d+)-3000(-dir)?", w.name)
        big = by.get(f"synth-{m[1]}-30000{m[2] or ''}") if m else None
        if m is None or big is None:
            continue
        small_med = statistics.median(s.wall for s in w.results["check"])
        big_med = statistics.median(s.wall for s in big.results["check"])
        rows.append(
            f"| {m[1]} | {'dir' if m[2] else 'wheel'} | {small_med:.2f} | {big_med:.2f} "
            f"| {100 * (big_med / small_med - 1):+.0f}% |"
        )
    if not rows:
        return ""
    return (
        "| patches | source | `check` at 3,000 files (s) | at 30,000 files (s) | change |\n"
        "| ---: | --- | ---: | ---: | ---: |\n" + "\n".join(rows) + "\n"
    )


if __name__ == "__main__":
    raise SystemExit(main())

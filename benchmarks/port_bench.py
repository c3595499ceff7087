"""Benchmark: ``hqp port --rebase`` against ``git cherry-pick`` on a generated port scenario, row by row
against the maintainer's re-cut, side by side in one run.

The scenario (``port_scenario.py``, seeded): two releases of a small package and a layered series of
about 50 rows on the older one, shaped like one real release bump (issue #37), with its ground truth:
per row, the content of every file the row touches after it, as the maintainer re-cut it for the new
release.

Both sides start from the same fork (``hqp import`` of the series, timed on hqp's side) and the same
new base commit (the one ``port --rebase`` writes), and carry the same fork commits:

- hqp: ``hqp port --to NEW --rebase --json`` with ``dir:`` sources for both releases; at each pause the
  paused row's files are written from the ground truth into the worktree hqp names, then
  ``--continue`` (or ``--skip`` where the ground truth is what the branch already has);
- git: ``git worktree add`` at the new base (timed: hqp's first pause pays the same checkout), then
  ``git cherry-pick --keep-redundant-commits BASE..TIP`` of the fork's commits there (no global or
  system config: the default ort merge); at each stop the row's files are written from the ground
  truth, ``git add -A``, ``git cherry-pick --continue``.
  ``--keep-redundant-commits`` keeps a row upstream took as an empty commit rather than stopping on it
  (git 2.39's cherry-pick cannot drop it): the generous reading for git.

So every row is tried on the right base as far as pauses go (a row a tool got wrong without a word
is carried on as it is: the damage shows in later rows, as it would for a maintainer). Each row is
**right** (every file it touches equals the ground truth after it, and no person was asked),
**WRONG** (a file differs, and no person was asked; "carried" when the row's own +/- lines are the
re-cut's and the file was already wrong before it) or **paused**. Times are wall time around each
process; the person's time (writing the ground truth) is not counted.

hqp runs twice, on two forks: cold (a cache of its own, empty: both releases' base commits are built)
and warm (as on a machine that ran ``check`` or an earlier port of these releases: the base commits
are linked from the cache). ``--pad N`` adds N files no row touches to both releases, with a release
bump's churn: ``--pad 4886`` gives vLLM's size (4,886 files, ~80 MB), where a tree's size shows in
every checkout, listing and index git or hqp makes. hqp runs with its bytecode compiled, as ``pip
install`` leaves it (this machine sets PYTHONDONTWRITEBYTECODE=1; a user's does not).

Run:  .venv/bin/python benchmarks/port_bench.py [--seed 37] [--pad 4886] [--json] [--keep DIR]
Not a timed test: the table goes into docs/port.md ("Benchmark").
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import port_scenario

HQP = [str(Path(sys.executable).parent / "hyperqwen-patches")]


def git_env() -> dict[str, str]:
    env = dict(os.environ)
    # As on a user's machine, where `pip install` compiled the package's bytecode: this machine's
    # PYTHONDONTWRITEBYTECODE=1 would have every hqp process compile its modules again.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(
        HQP_CACHE=os.environ.get("HQP_BENCH_CACHE", ""),
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="Bench",
        GIT_AUTHOR_EMAIL="bench@example.invalid",
        GIT_COMMITTER_NAME="Bench",
        GIT_COMMITTER_EMAIL="bench@example.invalid",
        GIT_EDITOR="true",
    )
    return env


class Clock:
    """Wall time of each process a side runs, by what it was."""

    def __init__(self) -> None:
        self.spent: dict[str, list[float]] = {}

    def run(self, what: str, argv: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
        start = time.perf_counter()
        proc = subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, env=git_env(), check=False
        )
        self.spent.setdefault(what, []).append(time.perf_counter() - start)
        return proc

    def total(self) -> float:
        return sum(sum(v) for v in self.spent.values())


def write_truth(worktree: Path, files: dict[str, str | None]) -> None:
    for path, content in files.items():
        target = worktree / path
        if content is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)


def show(fork: Path, commit: str, path: str) -> str | None:
    proc = subprocess.run(
        ["git", "show", f"{commit}:{path}"], cwd=fork, capture_output=True, text=True, check=False
    )
    return proc.stdout if proc.returncode == 0 else None


def score(
    fork: Path, truth: list[dict[str, Any]], base: str, after: dict[str, str], paused: set[str]
) -> dict[str, str]:
    """Row -> right / WRONG / paused; ``after`` maps a row to the commit that carries it (a row
    without one leaves the branch where the row before it did). A WRONG row whose own change (its
    +/- lines) is the re-cut's, on a file an earlier row left wrong, is "WRONG (carried)"."""
    out: dict[str, str] = {}
    at = base
    expected: dict[str, str | None] = {}  # each file as the re-cut has it so far
    for row in truth:
        before, at = at, after.get(row["row"], at)
        files: dict[str, str | None] = row["files"]
        if row["row"] in paused:
            out[row["row"]] = "paused"
        elif all(show(fork, at, p) == c for p, c in files.items()):
            out[row["row"]] = "right"
        else:
            own = all(
                _change(show(fork, before, p), show(fork, at, p))
                == _change(expected[p] if p in expected else show(fork, base, p), c)
                for p, c in files.items()
            )
            out[row["row"]] = "WRONG (carried)" if own else "WRONG"
        expected.update(files)
    return out


def _change(before: str | None, after: str | None) -> list[str]:
    lines = difflib.unified_diff((before or "").splitlines(), (after or "").splitlines(), n=0)
    return [x for x in lines if x[:1] in "+-" and not x.startswith(("+++", "---"))]


def run_hqp(
    work: Path, truth: dict[str, Any], clock: Clock, fork_name: str = "fork"
) -> tuple[dict[str, str], str, list[dict[str, Any]]]:
    repo, fork = work / "repo", work / fork_name
    rows = {r["row"]: r for r in truth["rows"]}
    made = clock.run(
        "import", [*HQP, "import", "--into", str(fork), "--create", "--repo", str(repo)], work
    )
    assert made.returncode == 0, made.stderr
    start = [
        *HQP, "port", "--to", port_scenario.NEW_VERSION, "--rebase", "--fork", str(fork),
        "--repo", str(repo), "--from-source", f"dir:{work / 'old'}", "--source", f"dir:{work / 'new'}",
        "--json",
    ]  # fmt: skip
    proc = clock.run("port", start, work)
    paused: set[str] = set()
    while True:
        assert proc.returncode in (0, 1), proc.stderr
        rebase = json.loads(proc.stdout)["reports"][0]["rebase"]
        if rebase["state"] != "paused":
            break
        row = rebase["paused"]["row"]
        paused.add(row)
        write_truth(Path(rebase["paused"]["worktree"]), rows[row]["files"])
        go_on = [*HQP, "port", "--rebase", "--fork", str(fork), "--repo", str(repo), "--json"]
        proc = clock.run("continue", [*go_on, "--continue"], work)
        if proc.returncode == 2 and "no change" in proc.stderr:
            proc = clock.run("continue", [*go_on, "--skip"], work)
    after = {c["row"]: c["commit"] for c in rebase["commits"]}
    scores = score(fork, truth["rows"], rebase["base"], after, paused)
    return scores, rebase["base"], rebase["adjacent"]


def run_git(work: Path, truth: dict[str, Any], base: str, clock: Clock) -> dict[str, str]:
    fork = work / "fork"
    rows = {r["row"]: r for r in truth["rows"]}
    tree = work / "cherry-pick"
    # Timed: a cherry-pick needs a checkout of the new base, as hqp's first pause does (one full
    # checkout each; hqp needs none when no row pauses).
    added = clock.run("checkout", ["git", "worktree", "add", "--detach", str(tree), base], fork)
    assert added.returncode == 0, added.stderr
    old_base = subprocess.run(["git", "rev-list", "--max-parents=0", "bench/0.30"], cwd=fork,
                              capture_output=True, text=True, check=True).stdout.split()[0]  # fmt: skip
    row_of = trailers(fork, f"{old_base}..bench/0.30")
    proc = clock.run(
        "cherry-pick",
        ["git", "cherry-pick", "--keep-redundant-commits", f"{old_base}..bench/0.30"],
        tree,
    )
    paused: set[str] = set()
    while proc.returncode != 0:
        head = subprocess.run(["git", "rev-parse", "-q", "--verify", "CHERRY_PICK_HEAD"], cwd=tree,
                              capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
        assert head, proc.stdout + proc.stderr
        row = row_of[head]
        paused.add(row)
        write_truth(tree, rows[row]["files"])
        subprocess.run(["git", "add", "-A"], cwd=tree, check=True, env=git_env())
        staged = subprocess.run(["git", "diff", "--cached", "--quiet"], cwd=tree, check=False)
        if staged.returncode == 0:  # the ground truth is what the branch has: an empty commit
            clock.run("continue", ["git", "commit", "--allow-empty", "--no-edit", "-q"], tree)
        proc = clock.run("continue", ["git", "cherry-pick", "--continue"], tree)
    after = {row: sha for sha, row in trailers(tree, f"{base}..HEAD").items()}
    return score(fork, truth["rows"], base, after, paused)


def trailers(cwd: Path, revs: str) -> dict[str, str]:
    """Commit -> its Hqp-Row trailer, for the commits of ``revs``."""
    proc = subprocess.run(
        ["git", "log", "--format=%H %(trailers:key=Hqp-Row,valueonly,separator=)", revs],
        cwd=cwd, capture_output=True, text=True, check=True,
    )  # fmt: skip
    out = {}
    for line in proc.stdout.splitlines():
        sha, _, row = line.partition(" ")
        if row.strip():
            out[sha] = row.strip()
    return out


def summary(name: str, scores: dict[str, str], clock: Clock) -> dict[str, Any]:
    counts = {
        k: sum(1 for v in scores.values() if v.startswith(k)) for k in ("right", "WRONG", "paused")
    }
    return {
        "tool": name,
        **counts,
        "WRONG_carried": sum(1 for v in scores.values() if v == "WRONG (carried)"),
        "seconds": round(clock.total(), 2),
        "spent": {k: [round(x, 2) for x in v] for k, v in clock.spent.items()},
    }


def compile_package() -> None:
    """The package's bytecode, as ``pip install`` leaves it (an editable install compiles nothing)."""
    import compileall

    import hyperqwen_patches

    compileall.compile_dir(Path(hyperqwen_patches.__file__).parent, quiet=1)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument(
        "--pad",
        type=int,
        default=0,
        help="files no row touches added to both releases: "
        f"{port_scenario.VLLM_FILES} gives a tree of vLLM's size",
    )
    parser.add_argument("--json", action="store_true", help="print the records as JSON")
    parser.add_argument("--keep", type=Path, help="build the scenario here and leave it")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="hqp-port-bench-"))
    try:
        if work.exists() and any(work.iterdir()):
            raise SystemExit(f"{work} is not empty")
        truth = port_scenario.write(
            port_scenario.build(args.seed), work, pad=args.pad, seed=args.seed
        )
        compile_package()
        # A cache of our own: the first hqp run is cold (the releases' base commits built), the
        # second warm (as on a machine that ran `check` or an earlier port of these releases).
        os.environ["HQP_BENCH_CACHE"] = str(work / "cache")
        # A release directory written this instant is not cached (its files could still change
        # within one timestamp tick); a real release was unpacked long before.
        time.sleep(2.5)
        ours, warm, theirs = Clock(), Clock(), Clock()
        hqp_scores, base, adjacent = run_hqp(work, truth, ours)
        warm_scores, warm_base, _ = run_hqp(work, truth, warm, "fork-warm")
        assert (warm_scores, warm_base) == (hqp_scores, base), "the warm run ported differently"
        git_scores = run_git(work, truth, base, theirs)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    rows = [
        {
            "row": r["row"],
            "kind": r["kind"],
            "hqp": hqp_scores[r["row"]],
            "git": git_scores[r["row"]],
        }
        for r in truth["rows"]
    ]
    tools = [
        summary("hqp port --rebase", hqp_scores, ours),
        summary("hqp port --rebase (warm cache)", hqp_scores, warm),
        summary("git cherry-pick", git_scores, theirs),
    ]
    records = {"seed": args.seed, "rows": rows, "tools": tools, "adjacent": adjacent}
    if args.json:
        print(json.dumps(records, indent=1, sort_keys=True))
        return 0
    kinds: dict[str, int] = {}
    for r in rows:
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
    print(
        f"{len(rows)} rows (seed {args.seed}): "
        + ", ".join(f"{v} {k}" for k, v in sorted(kinds.items()))
    )
    print()
    print("| tool | right, no person | WRONG, no person | needed a person | time |")
    print("|---|---|---|---|---|")
    for t in tools:
        parts = ", ".join(f"{k} {sum(v):.2f} s" + (f" ({len(v)}x)" if len(v) > 1 else "")
                          for k, v in t["spent"].items())  # fmt: skip
        wrong = f"{t['WRONG']}" + (f" ({t['WRONG_carried']} carried)" if t["WRONG_carried"] else "")
        print(
            f"| `{t['tool']}` | {t['right']} | {wrong} | {t['paused']} | {t['seconds']:.2f} s ({parts}) |"
        )
    print()
    print("| kind | rows | hqp right / WRONG / paused | git right / WRONG / paused |")
    print("|---|---|---|---|")
    for kind in port_scenario.KINDS:
        of = [r for r in rows if r["kind"] == kind]
        if of:
            h = [sum(1 for r in of if r["hqp"].startswith(k)) for k in ("right", "WRONG", "paused")]
            g = [sum(1 for r in of if r["git"].startswith(k)) for k in ("right", "WRONG", "paused")]
            print(f"| {kind} | {len(of)} | {' / '.join(map(str, h))} | {' / '.join(map(str, g))} |")
    print()
    for r in rows:
        if r["hqp"] != "right" or r["git"] != "right":
            print(f"  {r['row']:<22} {r['kind']:<16} hqp {r['hqp']:<16} git {r['git']}")
    for a in adjacent:
        print(f"  adjacent: {a['row']}: {a['file']}:{a['line']}: {a['note']} ({a['what']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

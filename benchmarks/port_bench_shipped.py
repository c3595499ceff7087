"""Benchmark: ``hqp port --rebase`` of the shipped series to real vLLM releases, against ``git
cherry-pick`` of the same fork commits onto the same new base, side by side in one run.

The shipped series (patches/manifest.yaml, on vLLM 0.29.0) is imported into a new fork (timed), then
ported to each target release from PyPI (through the tool's cache: the first run downloads the
wheels, later runs are warm). There is no maintainer's re-cut of this series for those releases, so a
row that needs a person is left out on both sides (hqp ``--skip``, git ``cherry-pick --skip``) and
the two branches are compared: the rows each ported without a person, and, where both left the same
rows out, whether the trees agree (a row hqp merged next to an upstream change and git paused on
shows as "hqp only").

Run:  .venv/bin/python benchmarks/port_bench_shipped.py [--to 0.30.0 --to 0.31.0] [--json]
Not a timed test: the table goes into docs/port.md ("Benchmark").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from port_bench import HQP, Clock, compile_package, trailers

ROOT = Path(__file__).resolve().parent.parent


def port_one(target: str, work: Path) -> dict[str, Any]:
    ours, theirs = Clock(), Clock()
    fork = work / "fork"
    made = ours.run(
        "import", [*HQP, "import", "--into", str(fork), "--create", "--repo", str(ROOT)], work
    )
    assert made.returncode == 0, made.stderr
    branch = f"bench/{target}"
    go = [*HQP, "port", "--rebase", "--fork", str(fork), "--repo", str(ROOT), "--json"]
    proc = ours.run("port", [*go, "--to", target, "--branch", branch], work)
    hqp_paused: list[str] = []
    while True:
        assert proc.returncode in (0, 1), proc.stderr
        rebase = json.loads(proc.stdout)["reports"][0]["rebase"]
        if rebase["state"] != "paused":
            break
        hqp_paused.append(rebase["paused"]["row"])
        proc = ours.run("skip", [*go, "--skip"], work)
    base, tip = rebase["base"], rebase["tip"]
    hqp_rows = {c["row"]: c["how"] for c in rebase["commits"]}

    tree = work / "cherry-pick"
    added = theirs.run("checkout", ["git", "worktree", "add", "--detach", str(tree), base], fork)
    assert added.returncode == 0, added.stderr
    old_branch = "qwen38/0.29"
    old_base = subprocess.run(["git", "rev-list", "--max-parents=0", old_branch], cwd=fork,
                              capture_output=True, text=True, check=True).stdout.split()[0]  # fmt: skip
    row_of = trailers(fork, f"{old_base}..{old_branch}")
    pick = theirs.run("cherry-pick", ["git", "cherry-pick", f"{old_base}..{old_branch}"], tree)
    git_paused: list[str] = []
    while pick.returncode != 0:
        head = subprocess.run(["git", "rev-parse", "-q", "--verify", "CHERRY_PICK_HEAD"], cwd=tree,
                              capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
        assert head, pick.stdout + pick.stderr
        git_paused.append(row_of[head])
        pick = theirs.run("skip", ["git", "cherry-pick", "--skip"], tree)
    git_tip = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True,
                             check=True).stdout.strip()  # fmt: skip
    same = None
    if sorted(hqp_paused) == sorted(git_paused):
        same = subprocess.run(["git", "diff", "--quiet", tip, git_tip], cwd=fork).returncode == 0
    rows = list(row_of.values())
    return {
        "to": target,
        "rows": len(rows),
        "hqp": {"ported": len(hqp_rows), "paused": hqp_paused, "how": hqp_rows,
                "seconds": round(ours.total(), 2), "spent": ours.spent},
        "git": {"ported": len(rows) - len(git_paused), "paused": git_paused,
                "seconds": round(theirs.total(), 2), "spent": theirs.spent},
        "same_tree": same,
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--to", action="append", help="target release (repeatable)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    targets = args.to or ["0.30.0", "0.31.0"]
    compile_package()
    results = []
    for target in targets:
        with tempfile.TemporaryDirectory(prefix="hqp-port-shipped-") as tmp:
            results.append(port_one(target, Path(tmp)))
    if args.json:
        print(json.dumps(results, indent=1, default=str))
        return 0
    print(
        "| to | rows | hqp: ported, paused | git: ported, paused | same tree | hqp time | git time |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        spent = ", ".join(f"{k} {sum(v):.2f} s" for k, v in r["hqp"]["spent"].items())
        gspent = ", ".join(f"{k} {sum(v):.2f} s" for k, v in r["git"]["spent"].items())
        print(
            f"| {r['to']} | {r['rows']} | {r['hqp']['ported']}, {', '.join(r['hqp']['paused']) or '-'} "
            f"| {r['git']['ported']}, {', '.join(r['git']['paused']) or '-'} "
            f"| {'-' if r['same_tree'] is None else 'yes' if r['same_tree'] else 'NO'} "
            f"| {r['hqp']['seconds']:.2f} s ({spent}) | {r['git']['seconds']:.2f} s ({gspent}) |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

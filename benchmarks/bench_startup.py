"""Benchmark: start-up, side by side with the interpreter's own, in one run.

Each command is a whole process, run in turns (one of each per round, the order rotating) so machine
load hits all alike; the figure is the median wall time. ``python -c pass`` is the floor any Python
tool pays; ``--version`` is served before anything is imported; ``list --json`` (in this repository)
goes through the fast path (``commands/argv.py``: no Typer, no PyYAML on a warm manifest cache);
``list --help`` goes through Typer with only ``list`` registered; ``python -c "import typer"`` is what
every command paid before.

Run:  env -u PYTHONDONTWRITEBYTECODE .venv/bin/python benchmarks/bench_startup.py [--runs 21]
Not a timed test: the figures go into docs/performance.md ("## Start-up").
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOL = str(Path(sys.executable).parent / "hyperqwen-patches")
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "hyperqwen-patches --version": [TOOL, "--version"],
    "hyperqwen-patches list --json": [TOOL, "list", "--json"],
    "hyperqwen-patches list --help": [TOOL, "list", "--help"],
    'python -c "import typer"': [sys.executable, "-c", "import typer"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    names = list(COMMANDS)
    for i in range(args.runs + 1):  # round 0 warms the caches and bytecode, untimed
        for name in names[i % len(names) :] + names[: i % len(names)]:
            start = time.perf_counter()
            subprocess.run(COMMANDS[name], cwd=ROOT, check=True, capture_output=True)
            if i:
                times[name].append(time.perf_counter() - start)
    floor = statistics.median(times["python -c pass"])
    print(f"runs: {args.runs} (medians; interleaved)\n")
    print("| command | median ms | min-max ms | / python -c pass |")
    print("| --- | ---: | ---: | ---: |")
    for name, t in times.items():
        med = statistics.median(t)
        print(
            f"| `{name}` | {med * 1e3:.0f} | {min(t) * 1e3:.0f}-{max(t) * 1e3:.0f} | {med / floor:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

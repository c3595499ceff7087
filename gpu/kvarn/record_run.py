"""Append one device run to ``gpu/kvarn/results/runs.jsonl``: the table of every KVarN device run,
with the command and the commit it ran, instead of a folder per run. Runs 1-45 are kept, frozen, in
``runs-1-45.jsonl`` beside it (one file of every run passed 2 MiB, more than a tracked file should be).

    python3 gpu/kvarn/record_run.py OUT_DIR --run N --command "TEST_N=8 bash gpu/kvarn/run_speedpath.sh"
                                    [--commit SHA] [--date YYYY-MM-DD] [--note TEXT]

``OUT_DIR`` is what the device tool brought back (``$OUT``). Each file in it becomes an entry of the
record's ``files``: ``*.json`` parsed, ``*.jsonl`` as a list, ``*.md`` and ``device.txt`` in full,
logs (``*.log``) by their last 30 lines (a log's whole text stays in git history at ``commit`` when it
was committed as a folder: runs 1-24 were). ``--commit`` defaults to HEAD. Runs are keyed by number;
recording a number again replaces that record, in whichever file holds it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
TABLE = HERE / "results" / "runs.jsonl"
ARCHIVE = HERE / "results" / "runs-1-45.jsonl"  # frozen: runs 1-45
ARCHIVED = 45
LOG_TAIL = 30


def read_files(out: Path) -> dict[str, object]:
    files: dict[str, object] = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        name = path.relative_to(out).as_posix()
        text = path.read_text(errors="replace")
        if path.suffix == ".json":
            files[name] = json.loads(text)
        elif path.suffix == ".jsonl":
            files[name] = [json.loads(line) for line in text.splitlines() if line.strip()]
        elif path.suffix == ".log":
            lines = text.splitlines()
            files[name] = {"lines": len(lines), "tail": lines[-LOG_TAIL:]}
        elif path.suffix in (".md", ".txt"):
            files[name] = text
        else:
            files[name] = {"bytes": path.stat().st_size, "kept": "in git history only"}
    return files


def record(
    out: Path, run: int, command: str | None, commit: str, date: str, note: str = ""
) -> dict:
    return {
        "run": run,
        "date": date,
        "commit": commit,
        "command": command,
        "note": note,
        "files": read_files(out),
    }


def append(entry: dict, table: Path = TABLE) -> None:
    rows = [json.loads(line) for line in table.read_text().splitlines()] if table.exists() else []
    rows = [r for r in rows if r["run"] != entry["run"]] + [entry]
    rows.sort(key=lambda r: r["run"])
    table.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--run", type=int, required=True)
    ap.add_argument("--command")
    ap.add_argument("--commit")
    ap.add_argument("--date")
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    git = ["git", "-C", str(HERE)]
    commit = args.commit or subprocess.check_output([*git, "rev-parse", "HEAD"], text=True).strip()
    date = (
        args.date
        or subprocess.check_output(
            [*git, "log", "-1", "--format=%ad", "--date=short", commit], text=True
        ).strip()
    )
    table = ARCHIVE if args.run <= ARCHIVED else TABLE
    append(record(args.out, args.run, args.command, commit, date, args.note), table)
    print(f"run {args.run} recorded in {table}")


if __name__ == "__main__":
    main()

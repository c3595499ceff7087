"""Benchmark: the checks of written rows (port/verify.py, port/stalecopy.py) over a 50-row rebase from
the real vLLM 0.29.0 to 0.30.0, with the parse store kept for the whole rebase and, for comparison,
a fresh one per row.

The series is generated (seeded) on 30 of 0.29.0's larger modules that 0.30.0 still has: each row
inserts a line at the top of a function's body that prints two of the module's functions or classes
and, in a method, an attribute the class sets on ``self``; every tenth row instead appends a
subclass overriding one of the module's methods with a copy of its body plus one line (what
``stalecopy`` looks for; 0.30.0 changed some of those methods). Each row is written as the rebase
writes it: at fuzz 0 when it applies on the branch so far, else by ``git merge-file``
(threeway.py); a row that still conflicts is left off the branch, as ``--skip`` would. Only the
checks are timed, not the writing.

Run:  .venv/bin/python benchmarks/bench_port_verify.py [--to 0.30.0]
Not a timed test: the figures go into docs/static-checks.md ("Checks of a written row").
"""

from __future__ import annotations

import argparse
import ast
import difflib
import random
import re
import time
from collections.abc import Callable

from hyperqwen_patches.engine.applying import apply_patch
from hyperqwen_patches.engine.patchmodel import Patch
from hyperqwen_patches.engine.patchscan import parse_patch
from hyperqwen_patches.port.linediff import changed_lines
from hyperqwen_patches.port.model import FORWARD
from hyperqwen_patches.port.stalecopy import CopyIndex, stale_copies
from hyperqwen_patches.port.threeway import merge_row
from hyperqwen_patches.port.triage import touched_paths
from hyperqwen_patches.port.verify import ParseStore, RowVerifier
from hyperqwen_patches.sources.pristine import open_pristine
from hyperqwen_patches.sources.pristinetree import PristineTree

ROWS = 50
FILES = 30

Reader = Callable[[bytes], bytes | None]


def overlay(changes: dict[bytes, bytes | None], base: Reader) -> Reader:
    return lambda p: changes[p] if p in changes else base(p)


def make_rows(old: PristineTree, new: PristineTree, seed: int = 37) -> list[tuple[str, Patch]]:
    rng = random.Random(seed)
    candidates = sorted(
        p
        for p in old.paths()
        if p.endswith(b".py") and new.read(p) is not None
        and 400 < (old.read(p) or b"").count(b"\n") < 3000
    )  # fmt: skip
    state = {p: old.read(p) or b"" for p in rng.sample(candidates, FILES)}
    files = sorted(state)
    rows: list[tuple[str, Patch]] = []
    for i in range(1, ROWS + 1):
        path = files[(i * 7) % FILES]
        before = state[path]
        lines = before.decode().splitlines(keepends=True)
        tree = ast.parse(before)
        defined = [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)]
        methods = [
            (cls, fn)
            for cls in tree.body
            if isinstance(cls, ast.ClassDef)
            for fn in cls.body
            if isinstance(fn, ast.FunctionDef) and (fn.end_lineno or 0) - fn.lineno >= 6
        ]
        if i % 10 == 0 and methods:
            cls, fn = rng.choice(methods)
            start = fn.body[0].lineno - 1
            trace = f"{' ' * fn.body[0].col_offset}print({i})  # row {i}\n"
            copy = [*lines[fn.lineno - 1 : start], trace, *lines[start : fn.end_lineno]]
            lines += ["\n", "\n", f"class HqpCopy{i}({cls.name}):\n", *copy]
        else:
            fns = [
                n
                for n in ast.walk(tree)
                if isinstance(n, ast.FunctionDef) and n.body and n.body[0].lineno > n.lineno
            ]
            fn = rng.choice(fns)
            first = fn.body[0]
            used = rng.sample(defined, min(2, len(defined)))
            owner = next((c for c, m in methods if m is fn), None)
            if owner is not None:
                text = "".join(lines[owner.lineno - 1 : owner.end_lineno])
                attrs = sorted(set(re.findall(r"self\.(\w+) =", text)))
                used += [f"self.{a}" for a in rng.sample(attrs, min(1, len(attrs)))]
            line = f"{' ' * first.col_offset}print({i}, {', '.join(used)})  # row {i}\n"
            lines.insert(first.lineno - 1, line)
        after = "".join(lines).encode()
        name = f"row-{i:02d}"
        diff = difflib.diff_bytes(
            difflib.unified_diff,
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            b"a/" + path,
            b"b/" + path,
        )
        rows.append((name, parse_patch(b"".join(diff), name=name)))
        state[path] = after
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--to", default="0.30.0")
    args = parser.parse_args()
    old = open_pristine("pypi:vllm==0.29.0", version="0.29.0")
    new = open_pristine(f"pypi:vllm=={args.to}", version=args.to)
    rows = make_rows(old, new)
    old_state: dict[bytes, bytes | None] = {}
    new_state: dict[bytes, bytes | None] = {}
    old_read, new_read = overlay(old_state, old.read), overlay(new_state, new.read)
    shared = RowVerifier(old_label="0.29.0 + rows", new_label=f"{args.to} + rows")
    index = CopyIndex(old.read, [p for p in old.paths() if p.endswith(b".py")])
    timings = {"verify (one store)": 0.0, "verify (a store per row)": 0.0, "stale copies": 0.0}
    fresh_parses = 0
    hows: dict[str, int] = {}
    errors = stale = 0
    for name, patch in rows:
        paths = touched_paths(patch)
        old_changes = apply_patch(patch, old_read).changes
        result = apply_patch(patch, new_read, FORWARD)
        if result.ok:
            new_changes, how = dict(result.changes), "applied"
        else:
            merge = merge_row(
                paths, old_read, overlay(old_changes, old_read), new_read, ("a", "b", "c")
            )
            new_changes = {f.path: f.content for f in merge.files}
            how = "merged" if merge.clean else "conflict"
        hows[how] = hows.get(how, 0) + 1
        old_before = {p: old_read(p) for p in paths}
        old_state.update(old_changes)
        if how == "conflict":
            continue
        new_before = {p: new_read(p) for p in paths}
        new_state.update(new_changes)
        sides = (
            overlay(old_before, old_read),
            old_read,
            overlay(new_before, new_read),
            new_read,
        )
        start = time.perf_counter()
        verdict = shared.verify(name, paths, *sides)
        timings["verify (one store)"] += time.perf_counter() - start
        errors += len(verdict.errors)
        for e in verdict.errors:
            print(name, how, e.to_static(name).subject, e.message, "|", e.definition)
        alone = RowVerifier(store=ParseStore())
        start = time.perf_counter()
        alone.verify(name, paths, *sides)
        timings["verify (a store per row)"] += time.perf_counter() - start
        fresh_parses += alone.store.parses
        start = time.perf_counter()
        added = {
            p: (data, changed_lines(new_before.get(p), data).added)
            for p in paths
            if (data := new_read(p)) is not None
        }
        for found in stale_copies(added, index, new.read, shared.store.tree):
            stale += 1
            print(name, how, found.message)
        timings["stale copies"] += time.perf_counter() - start
    print(f"rows: {len(rows)} ({', '.join(f'{n} {h}' for h, n in sorted(hows.items()))})")
    for name, seconds in timings.items():
        print(f"{name:26s} {seconds:6.2f} s")
    print(
        f"files parsed: {shared.store.parses} with one store, {fresh_parses} with a store per row"
    )
    print(f"errors: {errors}; stale copies: {stale}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

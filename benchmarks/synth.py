"""Synthetic workloads for ``bench_check.py``: a pristine tree and a series over it, reproducible from a seed.

The tree is ``vllm/pkg<k>/mod<i>.py`` files of 40 to 160 lines. Every line is unique within its file
(``value_<file>_<line> = ...``, ``def f_<file>_<line>():``) apart from blank lines, so no hunk's context
can match in two places: ``check`` fails an ambiguous placement, and the benchmark measures passing runs.
The tree is written to a directory (a ``dir:`` source) and, for the benchmark's default, packed as a
wheel served from a local find-links index (a ``pypi:`` source, the kind the shipped series uses).
The series is made on the evolving tree (each patch is a diff of the state the previous patches left), so
it applies in order at fuzz 0; each patch touches 1 to 3 files with 1 to 3 hunks each, so the patches'
size does not depend on the tree's size and the 3,000- and 30,000-file workloads carry series of the
same shape.
"""

from __future__ import annotations

import difflib
import random
import zipfile
from dataclasses import dataclass
from pathlib import Path

from hyperqwen_patches.sources.zipmember import (
    record_hash,  # RECORD's form: sha256=<urlsafe base64>
)


@dataclass(frozen=True)
class Series:
    patches: list[bytes]  # plain unified diffs (no mail header), in apply order
    hunks: int
    touched: int  # distinct files the series touches


def tree_path(index: int) -> str:
    return f"vllm/pkg{index % 64}/mod{index}.py"


def make_file(rng: random.Random, index: int) -> bytes:
    lines: list[bytes] = [b'"""Module %d."""' % index, b""]
    for i in range(rng.randint(40, 160)):
        roll = rng.random()
        if roll < 0.1:
            lines.append(b"")
        elif roll < 0.2:
            lines.append(b"def f_%d_%d():" % (index, i))
        else:
            lines.append(b"    value_%d_%d = compute(%d)" % (index, i, rng.randint(0, 99999)))
    return b"\n".join(lines) + b"\n"


def write_tree(root: Path, *, files: int, seed: int) -> dict[int, bytes]:
    """Write the pristine tree under ``root``; return index -> content (what the series is cut on)."""
    rng = random.Random(seed)
    contents: dict[int, bytes] = {}
    made: set[Path] = set()
    for index in range(files):
        data = make_file(rng, index)
        contents[index] = data
        path = root / tree_path(index)
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        path.write_bytes(data)
    return contents


def read_tree(root: Path, *, files: int) -> dict[int, bytes]:
    """What :func:`write_tree` returned, read back from ``root``."""
    return {index: (root / tree_path(index)).read_bytes() for index in range(files)}


def write_wheel(directory: Path, contents: dict[int, bytes], *, version: str) -> Path:
    """The tree as a pure-Python wheel ``vllm-<version>-py3-none-any.whl`` in ``directory`` (a
    find-links package index), with a RECORD, so ``check`` can take it as ``pypi:vllm==<version>``
    the way it takes the real release. Byte-identical for the same contents (fixed member times)."""
    directory.mkdir(parents=True, exist_ok=True)
    dist = f"vllm-{version}.dist-info"
    members = [(tree_path(index), contents[index]) for index in sorted(contents)]
    members += [
        (f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n".encode()),
        (
            f"{dist}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: synth\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        ),
    ]
    record = "".join(f"{name},{record_hash(data)},{len(data)}\n" for name, data in members)
    members.append((f"{dist}/RECORD", (record + f"{dist}/RECORD,,\n").encode()))
    wheel = directory / f"vllm-{version}-py3-none-any.whl"
    staged = wheel.with_suffix(".partial")
    with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=1)
    staged.rename(wheel)
    return wheel


def _edit(rng: random.Random, content: bytes, hunks: int, tag: int) -> bytes:
    lines = content.split(b"\n")[:-1]
    # Away from the file's edges (a hunk there is anchored to the edge by GNU's rules) and spaced so each
    # edit becomes its own hunk at 3 lines of context.
    room = range(8, max(9, len(lines) - 8), 8)
    positions = sorted(rng.sample(list(room), min(hunks, len(room))))
    for n, pos in enumerate(reversed(positions)):
        new = b"    patched_%d_%d = True" % (tag, n)
        kind = rng.random()
        if kind < 0.5:
            lines[pos : pos + 1] = [new]
        elif kind < 0.85:
            lines[pos:pos] = [new, b"    # patched %d %d" % (tag, n)]
        else:
            del lines[pos]
    return b"\n".join(lines) + b"\n"


def _unified(path: str, old: bytes, new: bytes) -> bytes:
    diff = difflib.diff_bytes(
        difflib.unified_diff,
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{path}".encode(),
        tofile=f"b/{path}".encode(),
        n=3,
    )
    # diff_bytes puts a tab-less header; the files all end with a newline, so no "\ No newline" lines.
    return b"".join(diff)


def make_series(contents: dict[int, bytes], *, patches: int, seed: int) -> Series:
    """``patches`` diffs over the tree described by ``contents``, each cut on the previous ones' result."""
    rng = random.Random(seed * 7919 + patches)
    state = dict(contents)
    indexes = sorted(state)
    out: list[bytes] = []
    hunks = 0
    touched: set[int] = set()
    for tag in range(patches):
        parts: list[bytes] = []
        for index in sorted(rng.sample(indexes, rng.randint(1, 3))):
            new = _edit(rng, state[index], rng.randint(1, 3), tag)
            diff = _unified(tree_path(index), state[index], new)
            if diff:
                parts.append(b"diff --git a/%s b/%s\n" % ((tree_path(index).encode(),) * 2) + diff)
                hunks += diff.count(b"\n@@ ") + diff.startswith(b"@@ ")
                state[index] = new
                touched.add(index)
        out.append(b"".join(parts))
    return Series(out, hunks, len(touched))


def manifest_text(*, pin: str, source: str, rows: list[str], branch: str) -> str:
    """A manifest for the synthetic series: one export point, one ``local`` row per patch."""
    lines = [
        "format: 1",
        f'pin: "{pin}"',
        "package: vllm",
        f"source: {source}",
        "paths: root",
        "export_points:",
        "  - name: main",
        f"    branch: {branch}",
        "rows:",
    ]
    for name in rows:
        lines += [
            f"  - name: {name}",
            f"    patch: patches/{name}.patch",
            "    kind: local",
            f'    what: "synthetic benchmark row {name}"',
            f'    cut_against: "{pin}"',
            '    retires_when: "never (benchmark data)"',
            "    export_point: main",
        ]
    lines.append("retirements: []")
    return "\n".join(lines) + "\n"

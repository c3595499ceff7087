"""The core invariants: one pin (1), series file ⇔ files ⇔ rows (2), every hunk at fuzz 0 (3), rendered
files up to date (6). Each is a ``(ctx) -> list[Finding]`` listed in :data:`checklist.PIPELINE`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hyperqwen_patches.checks.context import (
    CARRIED_DIRS,
    PATCH_SUFFIXES,
    CheckContext,
    Finding,
)
from hyperqwen_patches.display import show
from hyperqwen_patches.engine.patchscan import CRLF_NOTE
from hyperqwen_patches.series.manifestmodel import MANIFEST_RELPATH
from hyperqwen_patches.series.requirements import package_pins

if TYPE_CHECKING:
    from hyperqwen_patches.engine.applying import HunkResult


# --- invariant 1: one pin -----------------------------------------------------------------------------


def _repo_text(path: Path, shown: str) -> str:
    """A text file of the repository: ``ValueError`` (one line naming ``shown``) for a directory,
    a FIFO (opening one waits forever), a device, or bytes that are not UTF-8."""
    from hyperqwen_patches.inputfile import read_repo_file

    data = read_repo_file(path, "the file", shown=shown)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{shown} is not UTF-8 (byte {exc.start})") from None


def check_pin(ctx: CheckContext) -> list[Finding]:
    """Invariant 1: the manifest pin equals ``docker/requirements.txt``'s ``vllm==`` (the manifest's
    ``requirements`` file), where there is one: a series repository without it has nothing to
    disagree with, and ``requirements: null`` says the file there pins another build's release."""
    m = ctx.manifest
    if m.requirements is None:
        return [
            Finding(
                "pin",
                "note",
                MANIFEST_RELPATH,
                "requirements: null: no requirements file states this series' pin; not compared",
            )
        ]
    requirements = subject = m.requirements
    try:
        text = _repo_text(ctx.root / requirements, requirements)
    except ValueError as exc:  # a directory, a FIFO, a device, not UTF-8: one finding, not a hang
        return [Finding("pin", "error", subject, str(exc))]
    except FileNotFoundError:
        return [
            Finding(
                "pin",
                "note",
                subject,
                "not present: no file states the pin here; nothing to compare",
            )
        ]
    pins = package_pins(text, m.package)
    if not pins:
        return [
            Finding(
                "pin",
                "error",
                subject,
                f"{requirements} does not name {m.package}; it must pin {m.package}=={m.pin}",
            )
        ]
    findings: list[Finding] = []
    if len(pins) > 1:
        lines = ", ".join(str(n) for n, _ in pins)
        findings.append(
            Finding("pin", "error", subject, f"{m.package} is named more than once (lines {lines})")
        )
    for number, spec in pins:
        if spec != f"=={m.pin}":
            findings.append(
                Finding(
                    "pin",
                    "error",
                    f"{requirements}:{number}",
                    f"{m.package}{spec or ' (unpinned)'} disagrees with the manifest pin {m.pin} "
                    f"({MANIFEST_RELPATH}); the pin is stated once, everything else must equal it",
                )
            )
    return findings


# --- invariant 2: series file ⇔ files ⇔ rows ------------------------------------------------------------


def _series_entries(text: str) -> list[tuple[int, str]]:
    """(line, path) of each patch named by a series file; comments and blank lines skipped."""
    out: list[tuple[int, str]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line and not line.startswith("#"):
            out.append((number, line.split()[0]))  # quilt allows options (-p1) after the name
    return out


def _carried_files(root: Path, tops: tuple[str, ...] = CARRIED_DIRS) -> list[str]:
    """Repo-relative paths of every patch file and module file under the carried directories."""
    out: list[str] = []
    for top in tops:
        base = root / top
        if not base.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            rel_dir = Path(dirpath).relative_to(root).as_posix()
            in_files = f"/{rel_dir}/".find(f"/{top}/files/") == 0
            for name in sorted(filenames):
                if name.endswith((".pyc", ".pyo")):
                    continue
                if name.endswith(PATCH_SUFFIXES) or in_files:
                    out.append(f"{rel_dir}/{name}")
    return out


def check_series(ctx: CheckContext) -> list[Finding]:
    """Invariant 2: ``patches/series``, the files under patches/ and kvarn/, and the rows agree both ways."""
    from hyperqwen_patches.series.manifestmodel import DEFAULT_SERIES
    from hyperqwen_patches.series.render import series_entry

    m = ctx.manifest
    SERIES = m.series
    findings: list[Finding] = []

    def add(subject: str, message: str) -> None:
        findings.append(Finding("series", "error", subject, message))

    # Rows → files.
    for row in m.rows:
        file = ctx.root / row.source_path
        where = f"{MANIFEST_RELPATH}:{row.line}"
        if row.is_module:
            if not file.is_dir():
                add(
                    where,
                    f"row {row.name}: module directory {row.files} {'is not a directory' if file.exists() else 'does not exist'}",
                )
        elif not file.is_file():
            add(
                where,
                f"row {row.name}: patch file {row.patch} {'is not a file' if file.exists() else 'does not exist'}",
            )
    # Files → rows.
    named_patches = {r.patch for r in m.rows if r.patch is not None}
    module_dirs = [r.files for r in m.rows if r.files is not None]
    # A series in its own folder sits beside other series (another release's): only its folder
    # (and its module directories, which the rows name) is its own.
    tops = CARRIED_DIRS if m.series == DEFAULT_SERIES else (m.series_dir,)
    for rel in _carried_files(ctx.root, tops):
        if rel in named_patches:
            continue
        if any(rel.startswith(f"{d}/") for d in module_dirs if d is not None):
            continue
        what = "patch file" if rel.endswith(PATCH_SUFFIXES) else "module file"
        add(rel, f"{what} that no row of {MANIFEST_RELPATH} names")
    # Series file ⇔ rows, in order.
    try:
        text = _repo_text(ctx.root / SERIES, SERIES)
    except FileNotFoundError:
        add(SERIES, f"{SERIES} does not exist (run: hyperqwen-patches render)")
        return findings
    except ValueError as exc:
        add(SERIES, f"{exc} (run: hyperqwen-patches render)")
        return findings
    entries = _series_entries(text)
    expected = [series_entry(r, m.series_dir) for r in m.active_rows if not r.is_module]
    by_entry = {series_entry(r, m.series_dir): r for r in m.rows}
    listed = {e for _, e in entries}
    seen: set[str] = set()
    for number, entry in entries:
        listed_row = by_entry.get(entry)
        if entry in seen:
            add(f"{SERIES}:{number}", f"{entry} is listed more than once")
        elif listed_row is None:
            add(f"{SERIES}:{number}", f"{entry} is not a row of {MANIFEST_RELPATH}")
        elif listed_row.skip is not None:
            add(
                f"{SERIES}:{number}",
                f"{entry} is row {listed_row.name}, which is skipped ({listed_row.skip})",
            )
        elif listed_row.is_module:
            add(
                f"{SERIES}:{number}",
                f"{entry} is module row {listed_row.name}: a directory cannot be applied as a patch",
            )
        seen.add(entry)
    for entry in expected:
        if entry not in listed:
            row = by_entry[entry]
            add(SERIES, f"row {row.name} ({entry}) is missing from {SERIES}")
    expected_set = set(
        expected
    )  # built once: a set per entry made this quadratic (50,000 rows: 70 s)
    actual_order = [e for _, e in entries if e in expected_set]
    wanted_order = [e for e in expected if e in listed]
    if actual_order != wanted_order:
        add(
            SERIES,
            f"the order differs from the manifest's: {', '.join(actual_order)} (manifest: {', '.join(wanted_order)})",
        )
    if m.checksums is not None:
        findings += _check_sums(ctx)
    return findings


def _check_sums(ctx: CheckContext) -> list[Finding]:
    """The checksum file's sums against the files' bytes: one finding per file whose sum differs
    (what the project's own ``sha256sum -c`` would say), naming the file and the line."""
    import hashlib
    import re

    m = ctx.manifest
    assert m.checksums is not None
    base = ctx.root / Path(m.checksums).parent
    try:
        text = (ctx.root / m.checksums).read_text(encoding="utf-8")
    except FileNotFoundError:
        return [
            Finding(
                "series", "error", m.checksums, "does not exist (run: hyperqwen-patches render)"
            )
        ]
    findings: list[Finding] = []
    for number, line in enumerate(text.splitlines(), 1):
        match = re.fullmatch(r"([0-9a-f]{64}) [ *](.+)", line)
        where = f"{m.checksums}:{number}"
        if match is None:
            findings.append(Finding("series", "error", where, f"not a sha256sum line: {line!r}"))
            continue
        try:
            data = (base / match[2]).read_bytes()
        except OSError:
            findings.append(Finding("series", "error", where, f"{match[2]}: no such file"))
            continue
        actual = hashlib.sha256(data).hexdigest()
        if actual != match[1]:
            findings.append(
                Finding(
                    "series",
                    "error",
                    where,
                    f"{match[2]}: its sha256 is {actual[:12]}…, the checksum file says "
                    f"{match[1][:12]}… (run: hyperqwen-patches render)",
                )
            )
    return findings


# --- invariant 3: applies at fuzz 0 ---------------------------------------------------------------------


def _hunk_message(h: HunkResult, max_offset: int | None) -> str:
    if h.status == "ambiguous":
        where = h.others_text()
        return f"ambiguous: its context matches at line {h.applied_line or h.reported_line} and also at {where}"
    if h.status == "failed":
        reason = f": {h.reason}" if h.reason else ""
        return f"does not apply at fuzz 0 (stated line {h.stated_line}; GNU patch: FAILED at {h.reported_line}){reason}"
    return f"at offset {h.offset} lines, more than --max-offset {max_offset}"


def _near_miss_text(nm: Any) -> str:
    from hyperqwen_patches.console import show

    if not nm.differences:
        return f"its lines match at line {nm.line}, all {nm.total} equal"
    from hyperqwen_patches.engine.placement import aligned_summary

    lines = [
        f"closest place: line {nm.aligned_line or nm.line}: {aligned_summary(nm)} "
        "(- the patch expects, + the release has):"
    ]
    lines += [f"  {line}" for line in show(nm.aligned).splitlines()]
    return "\n".join(lines)


def check_apply(ctx: CheckContext) -> list[Finding]:
    """Invariant 3: every row applies, in order, at fuzz 0 onto the pristine tree; ambiguity fails."""
    findings: list[Finding] = []
    # Opened even for an empty series: it proves the pin's pristine tree can be obtained.
    _ = ctx.pristine
    for s in ctx.series:
        if s.row.skip is None and s.error is not None:
            findings.append(Finding("apply", "error", f"row {s.row.name}", s.error))
    # A file read with its CRs stripped, as GNU patch reads it: said once, never a failure.
    for s in ctx.series:
        if s.patch is not None and s.row.skip is None:
            for fp in s.patch.files:
                if fp.crlf_stripped:
                    path = show(fp.path)
                    findings.append(
                        Finding(
                            "apply",
                            "note",
                            f"row {s.row.name}: {path}",
                            f"{s.row.patch}:{fp.header_line}: {CRLF_NOTE}",
                        )
                    )
    result = ctx.applied
    # Where each hunk is in its patch file (patches/0002-x.patch:116), for the person who opens it.
    at = {
        (s.row.name, fp.path, h.number): f"{s.row.patch}:{h.patch_line}"
        for s in ctx.series
        if s.patch is not None and s.row.patch is not None
        for fp in s.patch.files
        for h in fp.hunks
    }
    for patch in result.patches:
        subject_row = f"row {patch.name}"
        if patch.status == "already-applied":
            findings.append(
                Finding(
                    "apply",
                    "error",
                    subject_row,
                    f"already applied on the pristine tree {ctx.pristine.label}: the release carries it; retire the row",
                )
            )
        if patch.error:
            findings.append(Finding("apply", "error", subject_row, patch.error))
        for file in patch.files:
            path = show(file.path)
            # A file-level error that only summarises failed hunks is said by the hunks themselves.
            if file.error and all(h.ok for h in file.hunks):
                findings.append(Finding("apply", "error", f"{subject_row}: {path}", file.error))
            if file.action == "create" and not file.ok:
                # A creation (a new file, a module file) has no context to place: say why it failed.
                why = next((h.reason for h in file.hunks if not h.ok and h.reason), None)
                if why:
                    findings.append(
                        Finding(
                            "apply", "error", f"{subject_row}: {path}", f"cannot create it: {why}"
                        )
                    )
                continue
            for h in file.hunks:
                over = ctx.max_offset is not None and h.ok and abs(h.offset) > ctx.max_offset
                if h.ok and not over:
                    continue
                detail = _near_miss_text(h.near_miss) if h.near_miss is not None else ""
                where = at.get((patch.name, file.path, h.number))
                findings.append(
                    Finding(
                        "apply",
                        "error",
                        f"{subject_row}: {path} hunk #{h.number}",
                        (f"{where}: " if where else "") + _hunk_message(h, ctx.max_offset),
                        detail,
                    )
                )
    return findings


# --- invariant 6: rendered files are current --------------------------------------------------------


def check_render(ctx: CheckContext) -> list[Finding]:
    """Invariant 6: PATCHES.md and patches/series are exactly what ``render`` writes."""
    from hyperqwen_patches.series.render import drift

    return [
        Finding(
            "render",
            "error",
            d.path,
            "differs from what render writes (run: hyperqwen-patches render)"
            if d.exists
            else "does not exist (run: hyperqwen-patches render)",
            d.diff,
        )
        for d in drift(ctx.manifest)
    ]

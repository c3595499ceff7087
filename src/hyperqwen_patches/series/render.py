"""``render``: the ledger ``PATCHES.md`` and the plain apply order ``patches/series``, from the manifest.

A series kept in its own folder (the manifest's ``series: patches/vllm-0.29/series``) gets its apply
order there and its ledger beside it, so a repository carrying another release's series keeps that
one's files. A series with a checksum file (``checksums: .../SHA256SUMS``) gets it rewritten from the
patch files' bytes, in ``sha256sum``'s format, so the project's own ``sha256sum -c`` keeps working.

Output is a pure function of the manifest (no dates, no environment, manifest order everywhere except
retirements, which are grouped by pin in version order), so ``render --check`` and invariant 6 can compare
bytes. Every manifest string placed in Markdown goes through :func:`md`, so a ``|`` or a newline in a
field cannot break a table.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import PurePosixPath

from hyperqwen_patches.atomicfile import write_atomic
from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.inputfile import read_repo_file
from hyperqwen_patches.records import record
from hyperqwen_patches.series.manifestmodel import Manifest, Row

LEDGER = "PATCHES.md"
SERIES = "patches/series"
# The first line of the header render writes atop a series file, and how many lines it has: adopt
# knows a file render wrote by it (re-adopting must not keep render's header as the user's comments).
SERIES_HEAD = "# The apply order of the series, rendered from patches/manifest.yaml by"
SERIES_HEAD_LINES = 5

_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|#~])")
_URL = re.compile(r"^https?://[^\s<>|]+$")
_WS = re.compile(r"\s+")


def one_line(text: str) -> str:
    """Collapse a (possibly multi-line) field to one line: a table cell or a comment holds one."""
    return _WS.sub(" ", text).strip()


def md(text: str | None) -> str:
    """Escape a manifest string for a Markdown table cell; a bare URL becomes an autolink."""
    if text is None or text == "":
        return "—"
    flat = one_line(text)
    if _URL.match(flat):
        return f"<{flat}>"  # autolinks are literal: no escapes needed (and none allowed) inside
    return _MD_SPECIAL.sub(r"\\\1", flat)


def short(commit: str | None) -> str:
    return commit[:12] if commit else "—"


def series_entry(row: Row, base: str = "patches") -> str:
    """A row's path as the series file writes it: relative to the series file's directory ``base``
    (quilt's convention)."""
    return PurePosixPath(os.path.relpath(row.source_path, base)).as_posix()


def version_key(version: str) -> tuple[tuple[int, str], ...]:
    """Order release versions numerically (0.9.0 < 0.10.0), stable for anything else."""
    return tuple((int(p), "") if p.isdigit() else (-1, p) for p in re.split(r"[.+-]", version))


def render_series(manifest: Manifest) -> str:
    where = f"in the directory that holds {manifest.package}/"
    if manifest.paths == "package":
        where = f"inside the {manifest.package}/ package directory"
    lines = [
        SERIES_HEAD,
        "# `hyperqwen-patches render`: do not edit by hand. Paths are relative to this directory",
        f"# (quilt's convention); apply each with `patch -p1 --fuzz 0` run {where}.",
        "# Lines starting with '#' are comments (module-file rows and skipped rows appear as comments),",
        f"# so a plain loop reads it with: grep -v '^#' {manifest.series}",
    ]
    assert len(lines) == SERIES_HEAD_LINES
    for row in manifest.rows:
        entry = series_entry(row, manifest.series_dir)
        if row.series_comment is not None:  # an adopted file's own comments, above their entry
            lines += row.series_comment.splitlines()
        if row.skip is not None:
            lines.append(f"# skipped: {entry} (row {row.name}: {one_line(row.skip)})")
        elif row.is_module:
            lines.append(f"# files: {entry}/ (row {row.name}: module files, copied into the tree)")
        else:
            line = f"{entry} {row.series_options}" if row.series_options else entry
            lines.append(line + (row.series_line_comment or ""))
    if manifest.series_tail is not None:  # an adopted file's comments after its last entry
        lines += manifest.series_tail.splitlines()
    return "\n".join(lines) + "\n"


def render_checksums(
    manifest: Manifest, checksums: str, pending: Mapping[str, bytes] | None = None
) -> bytes:
    """``sha256sum``'s output for every applied patch file, in series order, relative to the
    checksum file's directory (what ``sha256sum -c`` run there reads). A missing file is left out:
    invariant 2 names it. ``pending``: files about to be written (export's), by repo-relative path."""
    import hashlib

    base = PurePosixPath(checksums).parent.as_posix()
    out: list[bytes] = []
    for row in manifest.active_rows:
        if row.patch is None:
            continue
        data = (pending or {}).get(row.patch)
        if data is None:
            try:
                data = (manifest.root / row.patch).read_bytes()
            except OSError:
                continue
        rel = PurePosixPath(os.path.relpath(row.patch, base)).as_posix()
        out.append(f"{hashlib.sha256(data).hexdigest()}  {rel}\n".encode())
    return b"".join(out)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(cells) + " |" for cells in rows]
    return out


def render_ledger(manifest: Manifest) -> str:
    pkg = md(manifest.package)
    base = f"the directory that holds `{manifest.package}/`"
    if manifest.paths == "package":
        base = f"the `{manifest.package}/` package directory"
    out = [
        f"# PATCHES — the series carried on {pkg} {md(manifest.pin)}",
        "",
        "Rendered from `patches/manifest.yaml` by `hyperqwen-patches render`; do not edit by hand",
        "(`hyperqwen-patches check` fails when this file differs from what `render` writes). The apply",
        f"order is `{manifest.series}`; patch paths are relative to {base}, applied with",
        "`patch -p1 --fuzz 0`.",
        "",
        f"- **pin**: {pkg} {md(manifest.pin)}",
        f"- **pristine source**: {md(manifest.source)}",
        f"- **rows**: {len(manifest.active_rows)} applied, "
        f"{len(manifest.rows) - len(manifest.active_rows)} skipped; "
        f"**retirements**: {len(manifest.retirements)}",
        "",
        "## Export points",
        "",
    ]
    if manifest.export_points:
        out += _table(
            ["export point", "branch", "commit", "base"],
            [
                [md(e.name), md(e.branch), short(e.commit), short(e.base)]
                for e in manifest.export_points
            ],
        )
    else:
        out.append("None yet.")
    out += ["", "## Series", ""]
    active = manifest.active_rows
    if active:
        out += _table(
            [
                "#",
                "row",
                "patch",
                "kind",
                "what",
                "upstream",
                "cut against",
                "retires when",
                "export point",
                "commit",
            ],
            [
                [
                    str(i),
                    md(r.name),
                    md(r.source_path + ("/" if r.is_module else "")),
                    md(r.kind),
                    md(r.what),
                    md(r.upstream),
                    md(r.cut_against + (f" ({r.cut_note})" if r.cut_note else "")),
                    md(r.retires_when),
                    md(r.export_point),
                    short(r.commit),
                ]
                for i, r in enumerate(active, 1)
            ],
        )
    else:
        out.append("No rows yet.")
    skipped = [r for r in manifest.rows if r.skip is not None]
    if skipped:
        out += ["", "## Skipped rows", "", "Kept for history, not applied.", ""]
        out += _table(
            ["row", "patch", "kind", "reason"],
            [[md(r.name), md(r.source_path), md(r.kind), md(r.skip)] for r in skipped],
        )
    out += ["", "## Retirements", ""]
    if manifest.retirements:
        pins = sorted({t.pin for t in manifest.retirements}, key=version_key)
        for pin in pins:
            out += [f"### Carried by {pkg} {md(pin)}", ""]
            out += _table(
                ["row", "hunk", "upstream", "reason", "evidence"],
                [
                    [md(t.row), md(t.hunk), md(t.upstream), md(t.reason), md(t.evidence)]
                    for t in manifest.retirements
                    if t.pin == pin
                ],
            )
            out.append("")
        out.pop()
    else:
        out.append("None yet.")
    return "\n".join(out) + "\n"


def render(manifest: Manifest, pending: Mapping[str, bytes] | None = None) -> dict[str, bytes]:
    """Repo-relative path → the bytes ``render`` writes there (``pending``: patch files about to be
    written, which the checksum file must sum as they will be)."""
    out = {
        manifest.ledger: render_ledger(manifest).encode(),
        manifest.series: render_series(manifest).encode(),
    }
    if manifest.checksums is not None:
        out[manifest.checksums] = render_checksums(manifest, manifest.checksums, pending)
    return out


@record(frozen=True)
class Drift:
    """One rendered file that differs from what is on disk."""

    path: str
    exists: bool
    diff: str  # unified diff, on-disk → rendered


def drift(manifest: Manifest) -> list[Drift]:
    """What ``render`` would change, as unified diffs; writes nothing."""
    out: list[Drift] = []
    for rel, wanted in render(manifest).items():
        file = manifest.root / rel
        try:
            current: bytes | None = read_repo_file(file, "the file", shown=rel)
        except FileNotFoundError:
            current = None
        except ValueError as exc:  # a directory or a FIFO (opening one would wait forever)
            out.append(Drift(path=rel, exists=True, diff=f"{exc}\n"))
            continue
        if current == wanted:
            continue
        old = (current or b"").decode("utf-8", errors="replace").splitlines(keepends=True)
        new = wanted.decode().splitlines(keepends=True)
        lines = difflib.unified_diff(
            old, new, fromfile=f"a/{rel}" if current is not None else "/dev/null", tofile=f"b/{rel}"
        )
        text = "".join(
            line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
            for line in lines
        )
        out.append(Drift(path=rel, exists=current is not None, diff=text))
    return out


def write(manifest: Manifest) -> list[str]:
    """Write the rendered files that differ (each atomically); return their repo-relative paths."""
    changed: list[str] = []
    for rel, wanted in render(manifest).items():
        file = manifest.root / rel
        try:
            if read_repo_file(file, "the file", shown=rel) == wanted:
                continue
        except FileNotFoundError:
            pass
        except ValueError as exc:  # not ours to replace: what is there may be someone's work
            raise UsageError(f"{exc}; render writes only over regular files") from None
        write_atomic(file, wanted)
        changed.append(rel)
    return changed

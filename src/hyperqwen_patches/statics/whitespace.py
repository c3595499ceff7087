"""Whitespace: added lines with trailing whitespace, a space before a tab in the indent, or new blank
lines at the end of a file; exactly what ``git diff --check`` reports under git's default
``core.whitespace`` (``blank-at-eol,space-before-tab,blank-at-eof``).

The rules are git's ``ws.c``, not a regex of our own: "white space" is git's ``isspace`` (space, tab,
CR, LF; not VT or FF), so a CRLF line's CR is trailing whitespace, as ``git diff --check`` says; a
"space before tab" is a tab in the indent with a space since the start or the previous tab. A test
compares this module with real ``git diff --check`` on the same changes. Lines are numbered where the
row's lines land in the patched file (the engine's placement, offsets included).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperqwen_patches.engine.patchmodel import ADDED, CONTEXT, REMOVED, Patch, split_lines
from hyperqwen_patches.records import record

if TYPE_CHECKING:
    from hyperqwen_patches.checks.context import CheckContext, Finding
    from hyperqwen_patches.engine.applying import PatchResult
    from hyperqwen_patches.statics.analysis import StaticFinding

CHECK = "whitespace"

_SPACE = b" \t\r\n"  # git's isspace(): sane_ctype marks exactly these four


@record(frozen=True)
class WsError:
    """One added line git would flag: the file, its line in the new file, and git's wording."""

    path: bytes
    line: int
    errors: tuple[str, ...]  # git's words, in git's order
    text: bytes
    patch_line: int  # the hunk's ``@@`` line in the patch file

    @property
    def message(self) -> str:
        return ", ".join(self.errors) + "."


def line_errors(text: bytes) -> tuple[str, ...]:
    """git's blank-at-eol and space-before-tab rules for one added line (with or without its LF)."""
    if text.endswith(b"\n"):
        text = text[:-1]
    out: list[str] = []
    if text and text[-1] in _SPACE:
        out.append("trailing whitespace")
    written = 0
    for i, byte in enumerate(text):
        if byte == 0x20:
            continue
        if byte != 0x09:
            break
        if written < i:
            out.append("space before tab in indent")
            break
        written = i + 1
    return tuple(out)


def _blank(text: bytes) -> bool:
    return all(b in _SPACE for b in text)


def _trailing_blanks(lines: tuple[bytes, ...] | list[bytes]) -> int:
    n = 0
    for text in reversed(lines):
        if not _blank(text):
            break
        n += 1
    return n


def patch_errors(patch: Patch, starts: dict[tuple[bytes, int], int] | None = None) -> list[WsError]:
    """Every added line of ``patch`` git would flag. ``starts`` maps (path, hunk number) to the new
    file line where the hunk's postimage starts (the placement); default: the hunk's stated ``+N``."""
    out: list[WsError] = []
    for fp in patch.files:
        if fp.binary or fp.new_path is None:
            continue
        path = fp.new_path
        if fp.content is not None:  # a module file: every line is added
            lines = split_lines(fp.content)  # LF only: a lone CR is data, as git sees it
            out += [
                WsError(path, n, errs, text, 0)
                for n, text in enumerate(lines, 1)
                if (errs := line_errors(text))
            ]
            blanks = _trailing_blanks(lines)
            if blanks:
                out.append(
                    WsError(path, len(lines) - blanks + 1, ("new blank line at EOF",), b"", 0)
                )
            continue
        for hunk in fp.hunks:
            start = (starts or {}).get((path, hunk.number), hunk.new_start)
            line = start
            for kind, text in hunk.lines:
                if kind == REMOVED:
                    continue
                if kind == ADDED and (errs := line_errors(text)):
                    out.append(WsError(path, line, errs, text, hunk.patch_line))
                line += 1
            # blank-at-eof: a hunk with no trailing context ends at the end of the file; git flags
            # it when the new file ends in more blank lines than the old one did.
            if hunk.suffix_context == 0 or fp.old_path is None:
                new_blanks = _trailing_blanks(hunk.new_lines)
                old_blanks = _trailing_blanks(hunk.old_lines)
                if new_blanks > old_blanks and hunk.lines and hunk.lines[-1][0] != CONTEXT:
                    first = start + len(hunk.new_lines) - (new_blanks - old_blanks)
                    out.append(
                        WsError(path, first, ("new blank line at EOF",), b"", hunk.patch_line)
                    )
    return sorted(out, key=lambda e: (e.path, e.line))


def placement_starts(result: PatchResult) -> dict[tuple[bytes, int], int]:
    """(path, hunk) -> the new-file line of the hunk's first line, from the engine's placement."""
    return {
        (fr.path, hr.number): hr.applied_line
        for fr in result.files
        for hr in fr.hunks
        if hr.applied_line is not None and fr.action != "create"
    }


def whitespace_findings(
    patches: list[Patch], results: dict[str, PatchResult]
) -> list[StaticFinding]:
    from hyperqwen_patches.console import show
    from hyperqwen_patches.statics.analysis import StaticFinding

    found: list[StaticFinding] = []
    for patch in patches:
        result = results.get(patch.name)
        starts = placement_starts(result) if result is not None else None
        for e in patch_errors(patch, starts):
            where = f"patch line {e.patch_line}: " if e.patch_line else ""
            detail = f"{where}+{show(e.text).rstrip(chr(10))!r}" if e.text else where.rstrip(": ")
            found.append(
                StaticFinding(CHECK, "error", patch.name, e.path, e.line, e.message, detail)
            )
    return found


def check_whitespace(ctx: CheckContext) -> list[Finding]:
    """Added lines with whitespace errors, as ``git diff --check`` reports them, per row."""
    patches = [s.patch for s in ctx.series if s.patch is not None and s.row.skip is None]
    applied = ctx.peek("applied")
    results = {p.name: p for p in applied.patches} if applied is not None else {}
    return [f.to_finding() for f in whitespace_findings(patches, results)]

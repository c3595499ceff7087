"""Parse unified diffs (plain and git-style) into typed, byte-exact patches.

Why our own scanner and not ``unidiff`` alone: unidiff decodes the patch to ``str`` (we keep bytes end
to end, Latin-1 and CRLF content included), it has no notion of GNU patch's rule that a ``---`` line is
a file header only when ``+++`` and then a hunk header follow (so a commit message containing ``---``
derails it), and it does not model ``\\ No newline at end of file`` on the line it applies to. The tests
use unidiff as an independent cross-check of hunk structure on well-formed input
(``tests/test_engine_parse.py``).

Everything here is a pure function on bytes: no disk, no git.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from hyperqwen_patches.display import show
from hyperqwen_patches.engine.patchmodel import (
    ADDED,
    CONTEXT,
    REMOVED,
    FilePatch,
    Hunk,
    Patch,
    PatchParseError,
    parsed_hunk,
    split_lines,
)
from hyperqwen_patches.engine.patchpaths import (
    check_relative_path,
    git_names,
    strip_git_name,
    strip_path,
)
from hyperqwen_patches.records import record

_HUNK_HEADER = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_GIT_HEADER = re.compile(rb"^diff --git ")
_MODE = re.compile(rb"^[0-7]{6}$")
_NO_NEWLINE = b"\\"
LINENUM_MAX = 2**63 - 1  # GNU patch's LINENUM (a signed 64-bit long)
_EOL = b"\r\n"


@record(slots=True)
class _GitHeader:
    line: int
    names: tuple[bytes, bytes] | None
    old_mode: int | None = None
    new_mode: int | None = None
    new_file: bool = False
    deleted: bool = False
    rename_from: bytes | None = None
    rename_to: bytes | None = None
    copy_from: bytes | None = None
    copy_to: bytes | None = None
    binary: bool = False


def _mode(value: bytes, *, patch: str, line: int) -> int:
    value = value.strip()
    if not _MODE.match(value):
        raise PatchParseError(
            patch, line, f"bad file mode {show(value)!r} (expected six octal digits)"
        )
    mode = int(value, 8)
    kind = {0o120000: "a symbolic link", 0o160000: "a submodule (gitlink)"}.get(mode & 0o170000)
    if kind is not None:
        # Writing its target as a plain file (what happened) is worse than refusing by name.
        raise PatchParseError(
            patch,
            line,
            f"mode {value.decode()} is {kind}: the tool writes regular files only",
            hint="carry the link in a module row's directory, or make the change by hand",
        )
    return mode


def _is_file_header(lines: list[bytes], i: int) -> bool:
    """GNU patch's rule: ``---`` is a file header only when ``+++`` and then a hunk header follow."""
    return (
        lines[i].startswith(b"--- ")
        and i + 2 < len(lines)
        and lines[i + 1].startswith(b"+++ ")
        and lines[i + 2].startswith(b"@@ ")
    )


def parse_patch(data: bytes, *, name: str, strip: int = 1) -> Patch:
    """Parse a patch file into a :class:`Patch`.

    Raises :class:`PatchParseError` naming the patch and line for an empty patch, a truncated or
    malformed hunk, a binary diff, a path escaping the tree, or a header that cannot be read.
    """
    if not data.strip():
        raise PatchParseError(name, None, "empty patch: no file headers and no hunks")
    lines = split_lines(data)
    files: list[FilePatch] = []
    preamble_end: int | None = None
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        if _GIT_HEADER.match(line):
            if preamble_end is None:
                preamble_end = i
            i, file_patch = _parse_git_section(lines, i, name=name, strip=strip)
            if file_patch is not None:
                files.append(file_patch)
            continue
        if _is_file_header(lines, i):
            if preamble_end is None:
                preamble_end = i
            old = strip_path(line[4:], strip, patch=name, line=i + 1)
            new = strip_path(lines[i + 1][4:], strip, patch=name, line=i + 2)
            if old is None and new is None:
                raise PatchParseError(name, i + 1, "both sides of the file header are /dev/null")
            header = i + 1
            crlf = strips_cr(lines[i + 1])
            i, hunks = _parse_hunks(lines, i + 2, name=name, strip_cr=crlf)
            files.append(
                FilePatch(
                    old_path=old, new_path=new, hunks=hunks, header_line=header, crlf_stripped=crlf
                )
            )
            continue
        if line.startswith(b"@@ -") and _HUNK_HEADER.match(line) and preamble_end is not None:
            raise PatchParseError(
                name, i + 1, "hunk header outside a file (no '---'/'+++' header before it)"
            )
        i += 1
    if not files:
        raise PatchParseError(
            name,
            None,
            "no file headers found: this is not a unified diff",
            hint="a patch needs '--- a/<path>', '+++ b/<path>' and '@@' hunk headers",
        )
    preamble = b"".join(lines[: preamble_end or 0])
    return Patch(name=name, files=tuple(files), preamble=preamble)


def _after(value: bytes, *prefixes: bytes) -> bytes | None:
    """What follows the first of ``prefixes`` that ``value`` starts with; None when none does."""
    for prefix in prefixes:
        if value.startswith(prefix):
            return value[len(prefix) :]
    return None


def _parse_git_section(
    lines: list[bytes], start: int, *, name: str, strip: int
) -> tuple[int, FilePatch | None]:
    """A ``diff --git`` section: extended headers, then optional ``---``/``+++`` and hunks."""
    head = _GitHeader(line=start + 1, names=git_names(lines[start]))
    i = start + 1
    n = len(lines)
    while i < n:
        line = lines[i]
        value = line.rstrip(b"\r\n")
        # Each value is what follows its own prefix, sliced by that prefix's length (git's older
        # "rename old"/"rename new" are one byte shorter than "rename from"/"rename to").
        if (rest := _after(value, b"old mode ")) is not None:
            head.old_mode = _mode(rest, patch=name, line=i + 1)
        elif (rest := _after(value, b"new mode ")) is not None:
            head.new_mode = _mode(rest, patch=name, line=i + 1)
        elif (rest := _after(value, b"deleted file mode ")) is not None:
            head.deleted = True
            head.old_mode = _mode(rest, patch=name, line=i + 1)
        elif (rest := _after(value, b"new file mode ")) is not None:
            head.new_file = True
            head.new_mode = _mode(rest, patch=name, line=i + 1)
        elif (rest := _after(value, b"rename from ", b"rename old ")) is not None:
            head.rename_from = rest
        elif (rest := _after(value, b"rename to ", b"rename new ")) is not None:
            head.rename_to = rest
        elif (rest := _after(value, b"copy from ")) is not None:
            head.copy_from = rest
        elif (rest := _after(value, b"copy to ")) is not None:
            head.copy_to = rest
        elif line.startswith((b"Binary files ", b"GIT binary patch")):
            head.binary = True
        elif line.startswith((b"similarity index ", b"dissimilarity index ", b"index ")):
            pass
        else:
            break
        i += 1
    label = show(head.names[1]) if head.names else f"line {head.line}"
    if head.binary:
        raise PatchParseError(
            name,
            head.line,
            f"binary diff for {label}: binary patches are not supported",
            hint="carry binary files as module files (copied whole), not as diffs",
        )
    old: bytes | None
    new: bytes | None
    hunks: tuple[Hunk, ...] = ()
    header_line = head.line
    crlf = False
    if i < n and lines[i].startswith(b"--- ") and i + 1 < n and lines[i + 1].startswith(b"+++ "):
        if not (i + 2 < n and lines[i + 2].startswith(b"@@ ")):
            raise PatchParseError(name, i + 3, f"file header for {label} is not followed by a hunk")
        # The file to patch comes from the ---/+++ names, as GNU patch and git apply choose it.
        old = strip_path(lines[i][4:], strip, patch=name, line=i + 1)
        new = strip_path(lines[i + 1][4:], strip, patch=name, line=i + 2)
        crlf = strips_cr(lines[i + 1])
        i, hunks = _parse_hunks(lines, i + 2, name=name, strip_cr=crlf)
    else:
        if head.names is None:
            raise PatchParseError(name, head.line, "cannot read the file names of 'diff --git'")
        old = strip_path(head.names[0], strip, patch=name, line=head.line)
        new = strip_path(head.names[1], strip, patch=name, line=head.line)
        if head.new_file:
            old = None
        if head.deleted:
            new = None
    rename = head.rename_from is not None and head.rename_to is not None
    copy = head.copy_from is not None and head.copy_to is not None
    if rename or copy:
        # rename/copy headers carry names without the a/ b/ prefixes: they are already stripped
        # by one level, which is what -p1 means for git-style diffs.
        src = head.rename_from if rename else head.copy_from
        dst = head.rename_to if rename else head.copy_to
        assert src is not None and dst is not None
        src_path = strip_git_name(src, strip, patch=name, line=head.line)
        dst_path = strip_git_name(dst, strip, patch=name, line=head.line)
        old = src_path if old is not None else old
        new = dst_path if new is not None else new
    if head.new_file:
        old = None
    if head.deleted:
        new = None
    if old is None and new is None:
        raise PatchParseError(name, head.line, "both sides of the file header are /dev/null")
    nothing = not (hunks or rename or copy or head.new_file or head.deleted)
    if nothing and head.old_mode is None and head.new_mode is None:
        # A 'diff --git' with nothing to do (GNU patch skips it too).
        return i, None
    return i, FilePatch(
        old_path=old,
        new_path=new,
        hunks=hunks,
        old_mode=head.old_mode,
        new_mode=head.new_mode,
        rename=rename,
        copy=copy,
        header_line=header_line,
        crlf_stripped=crlf,
    )


# What a file read with its CRs stripped is told as (apply's stderr, check's note), once per file.
CRLF_NOTE = (
    "its lines end in CRLF; read as GNU patch 2.7.6 reads them (the CR of every line of its hunks "
    'stripped: "Stripping trailing CRs from patch")'
)


def strips_cr(plus_line: bytes) -> bool:
    """GNU patch 2.7.6's rule, measured on the binary: a file's ``+++`` line ending in CR LF makes
    it strip the trailing CR of every line of that file's hunks (and print "(Stripping trailing CRs
    from patch; use --binary to disable.)" before "patching file"). The ``---``, ``diff --git`` and
    ``index`` lines do not count, and the next file decides again (tests/test_crlf_patches.py)."""
    return plus_line.endswith(b"\r\n")


def _uncr(line: bytes) -> bytes:
    return line[:-2] + b"\n" if line.endswith(b"\r\n") else line


def _parse_hunks(
    lines: list[bytes], i: int, *, name: str, strip_cr: bool = False
) -> tuple[int, tuple[Hunk, ...]]:
    """Read consecutive ``@@`` hunks starting at ``lines[i]``; return the index after them.

    ``strip_cr``: the CR of each line the hunks consume goes first (:func:`strips_cr`); ``lines``
    is the caller's own split, rewritten in place."""
    hunks: list[Hunk] = []
    n = len(lines)
    while i < n and lines[i].startswith(b"@@ "):
        if strip_cr:
            lines[i] = _uncr(lines[i])
        match = _HUNK_HEADER.match(lines[i])
        if match is None:
            raise PatchParseError(name, i + 1, f"malformed hunk header {show(lines[i].rstrip())!r}")
        old_start = int(match[1])
        old_len = int(match[2]) if match[2] is not None else 1
        new_start = int(match[3])
        new_len = int(match[4]) if match[4] is not None else 1
        header = i + 1
        # GNU patch's line numbers are 64-bit and it refuses a header whose range would overflow
        # them ("malformed patch"); Python's integers would not, and placed the hunk anyway.
        if (
            old_start >= LINENUM_MAX - old_len
            or new_start >= LINENUM_MAX - new_len
            or old_len + new_len >= LINENUM_MAX - 8
        ):
            raise PatchParseError(
                name, header, f"line numbers too large in {show(lines[i].rstrip(_EOL))!r}"
            )
        number = len(hunks) + 1
        old_left, new_left = old_len, new_len
        body: list[tuple[int, bytes]] = []
        # The derived sides are built in the same pass (this loop runs once per line of every patch;
        # recomputing them per hunk afterwards cost as much as the loop itself).
        old: list[bytes] = []
        new: list[bytes] = []
        append, old_append, new_append = body.append, old.append, new.append
        first_change = -1
        last_change = -1
        marked = False  # the previous line was a "\ No newline" marker
        i += 1
        while old_left > 0 or new_left > 0:
            if i >= n:
                raise PatchParseError(
                    name,
                    header,
                    f"hunk #{number} is truncated: the patch ends with {old_left} old and "
                    f"{new_left} new lines of the @@ -{old_start},{old_len} +{new_start},{new_len} @@ "
                    "header still missing",
                )
            line = lines[i]
            if strip_cr and line.endswith(b"\r\n"):
                line = lines[i] = line[:-2] + b"\n"
            if not line.endswith(b"\n"):
                # GNU: "patch unexpectedly ends in middle of line" (exit 2): a file cut off inside
                # its last line, not a last line without newline (that carries its marker).
                raise PatchParseError(
                    name, i + 1, f"hunk #{number}: the patch ends in the middle of a line"
                )
            lead = line[0]  # split_lines never yields an empty line
            # The common kinds first: this loop runs once per line of every patch.
            if lead == CONTEXT:
                old_left -= 1
                new_left -= 1
                text = line[1:]
                append((CONTEXT, text))
                old_append(text)
                new_append(text)
            elif lead in (REMOVED, ADDED):
                last_change = len(body)
                if first_change < 0:
                    first_change = last_change
                text = line[1:]
                append((lead, text))
                if lead == REMOVED:
                    old_left -= 1
                    old_append(text)
                else:
                    new_left -= 1
                    new_append(text)
            elif line == b"\n":
                # An empty line is a context line whose leading space was eaten by an editor or a
                # mailer; GNU patch accepts it as such (but not a bare CR LF line: malformed).
                old_left -= 1
                new_left -= 1
                append((CONTEXT, line))
                old_append(line)
                new_append(line)
            elif lead == 0x5C:  # "\ No newline at end of file"
                # GNU reads the marker only after the last line of a side (the last old line for a
                # removal or context line, the last new one for an addition or context line);
                # anywhere else, or twice, it is a malformed line.
                kind = body[-1][0] if body else None
                last_old = old_left == 0 and kind in (REMOVED, CONTEXT)
                last_new = new_left == 0 and kind in (ADDED, CONTEXT)
                if marked or not (last_old or last_new):
                    raise PatchParseError(
                        name,
                        i + 1,
                        f"malformed hunk #{number}: '\\ No newline at end of file' after a line "
                        "that is not the last of its side",
                    )
                _drop_newline(body, old, new, name=name, line=i + 1)
                marked = True
                i += 1
                continue
            else:
                raise PatchParseError(
                    name,
                    i + 1,
                    f"malformed hunk #{number}: line {show(line.rstrip(_EOL))!r} is not "
                    f"context, removal or addition ({old_left} old and {new_left} new lines "
                    "of its header still expected)",
                )
            marked = False
            if old_left < 0 or new_left < 0:
                raise PatchParseError(
                    name,
                    i + 1,
                    f"hunk #{number} has more lines than its header "
                    f"@@ -{old_start},{old_len} +{new_start},{new_len} @@ states",
                )
            i += 1
        if i < n and lines[i].startswith(_NO_NEWLINE) and not marked:
            if strip_cr:
                lines[i] = _uncr(lines[i])
            _drop_newline(body, old, new, name=name, line=i + 1)
            i += 1
        if i < n and _looks_like_hunk_line(lines[i]):
            # GNU patch silently ignores such a line (the hunk is complete by its counts), which
            # drops a change the author meant; we refuse the patch instead (docs/engine.md).
            raise PatchParseError(
                name,
                i + 1,
                f"hunk #{number} has more lines than its header "
                f"@@ -{old_start},{old_len} +{new_start},{new_len} @@ states "
                f"(line {show(lines[i].rstrip(_EOL))!r} follows it)",
            )
        if old_len == 0 and new_len == 0:
            raise PatchParseError(
                name, header, f"hunk #{number} is empty (@@ -{old_start},0 +{new_start},0 @@)"
            )
        prefix = first_change if first_change >= 0 else len(body)
        suffix = len(body) - 1 - last_change if last_change >= 0 else len(body)
        hunks.append(
            parsed_hunk(
                number,
                old_start,
                old_len,
                new_start,
                new_len,
                tuple(body),
                header,
                tuple(old),
                tuple(new),
                prefix,
                suffix,
            )
        )
    return i, tuple(hunks)


def _looks_like_hunk_line(line: bytes) -> bool:
    """A line that continues a hunk whose header counted too few lines (not a header, not the
    ``-- `` signature git format-patch ends with)."""
    if line.startswith((b"--- ", b"+++ ", b"-- \n", b"-- \r\n", b"--\n")):
        return False
    return line[:1] in (b"+", b"-")


def _drop_newline(
    body: list[tuple[int, bytes]],
    old: list[bytes],
    new: list[bytes],
    *,
    name: str,
    line: int,
) -> None:
    """``\\ No newline at end of file``: the previous line has no line ending (in every list that
    holds it)."""
    if not body:
        raise PatchParseError(name, line, "'\\ No newline at end of file' with no line before it")
    kind, text = body[-1]
    if not text.endswith(b"\n"):
        return
    # Only the LF goes: a CR before it is the file's last byte ("b\r" at end of file).
    text = text[:-1]
    body[-1] = (kind, text)
    if kind != ADDED:
        old[-1] = text
    if kind != REMOVED:
        new[-1] = text


def patch_from_files(name: str, files: Mapping[bytes, bytes]) -> Patch:
    """A module-file row: a patch that creates each file with exactly the given bytes.

    Applying it where a file already exists with identical content is "already-applied"; with
    different content it fails (see ``engine.applying``).
    """
    file_patches: list[FilePatch] = []
    for path in sorted(files):
        check_relative_path(path, patch=name, line=None)
        content = files[path]
        body = tuple((ADDED, line) for line in split_lines(content))
        hunks: tuple[Hunk, ...] = ()
        if body:
            hunks = (
                Hunk(
                    number=1,
                    old_start=0,
                    old_len=0,
                    new_start=1,
                    new_len=len(body),
                    lines=body,
                    patch_line=0,
                ),
            )
        file_patches.append(FilePatch(old_path=None, new_path=path, hunks=hunks, content=content))
    return Patch(name=name, files=tuple(file_patches), module_files=True)

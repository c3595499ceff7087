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

from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.records import field, record

TYPE_CHECKING = False  # not typing's: the engine's import path stays light
if TYPE_CHECKING:
    from typing import Literal

    FileAction = Literal["modify", "create", "delete", "rename", "copy"]

#: The line kinds a hunk holds, as the byte that starts them in the patch.
CONTEXT = 0x20  # b" "
REMOVED = 0x2D  # b"-"
ADDED = 0x2B  # b"+"

DEV_NULL = b"/dev/null"

_HUNK_HEADER = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_GIT_HEADER = re.compile(rb"^diff --git ")
_MODE = re.compile(rb"^[0-7]{6}$")
_NO_NEWLINE = b"\\"
LINENUM_MAX = 2**63 - 1  # GNU patch's LINENUM (a signed 64-bit long)
_EOL = b"\r\n"


class PatchParseError(UsageError):
    """A patch file that cannot be read as a unified diff; names the patch, its line and what is wrong."""

    def __init__(
        self, patch: str, line: int | None, problem: str, *, hint: str | None = None
    ) -> None:
        where = f"{patch}:{line}" if line is not None else patch
        super().__init__(f"{where}: {problem}", hint=hint)
        self.patch = patch
        self.line = line
        self.problem = problem


@record(frozen=True, slots=True)
class Hunk:
    """One ``@@`` hunk. ``lines`` holds ``(kind, text)`` pairs: kind is CONTEXT/REMOVED/ADDED and text
    the line's bytes with its ending (no ending when ``\\ No newline at end of file`` followed it)."""

    number: int  # 1-based within its file, as GNU patch numbers them
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: tuple[tuple[int, bytes], ...]
    patch_line: int  # line of the ``@@`` header in the patch file (1-based)

    # Derived once at construction (placement reads them for every candidate position):
    #: the preimage, context and removed lines in order (the pattern placement looks for);
    old_lines: tuple[bytes, ...] = field(init=False, repr=False, compare=False)
    #: the postimage, context and added lines in order;
    new_lines: tuple[bytes, ...] = field(init=False, repr=False, compare=False)
    #: context lines before the first change (GNU patch's ``pch_prefix_context``);
    prefix_context: int = field(init=False, repr=False, compare=False)
    #: context lines after the last change (GNU patch's ``pch_suffix_context``).
    suffix_context: int = field(init=False, repr=False, compare=False)
    #: index in ``old_lines`` of the line placement scans the file for.
    anchor: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        lines = self.lines
        prefix = 0
        for kind, _ in lines:
            if kind != CONTEXT:
                break
            prefix += 1
        suffix = 0
        for kind, _ in reversed(lines):
            if kind != CONTEXT:
                break
            suffix += 1
        old = tuple([text for kind, text in lines if kind != ADDED])
        set_ = object.__setattr__  # frozen record: derived fields are set once, here
        set_(self, "old_lines", old)
        set_(self, "new_lines", tuple([text for kind, text in lines if kind != REMOVED]))
        set_(self, "prefix_context", prefix)
        set_(self, "suffix_context", suffix)
        set_(self, "anchor", _anchor(old))

    def reversed(self) -> Hunk:
        """The hunk that undoes this one: sides swapped, removed and added lines exchanged."""
        hunk = object.__new__(Hunk)
        set_ = object.__setattr__
        set_(hunk, "number", self.number)
        set_(hunk, "old_start", self.new_start)
        set_(hunk, "old_len", self.new_len)
        set_(hunk, "new_start", self.old_start)
        set_(hunk, "new_len", self.old_len)
        set_(hunk, "lines", _reversed_lines(self))
        set_(hunk, "patch_line", self.patch_line)
        # The derived fields without __post_init__'s pass: the sides swap, and the context runs
        # at either end stay where they are (apply's presence check reverses every hunk).
        set_(hunk, "old_lines", self.new_lines)
        set_(hunk, "new_lines", self.old_lines)
        set_(hunk, "prefix_context", self.prefix_context)
        set_(hunk, "suffix_context", self.suffix_context)
        set_(hunk, "anchor", _anchor(self.new_lines))
        return hunk


def _reversed_lines(hunk: Hunk) -> tuple[tuple[int, bytes], ...]:
    """The lines of ``hunk.reversed()``: kinds swapped, removed before added in each run."""
    lines = hunk.lines
    lead, trail = hunk.prefix_context, hunk.suffix_context
    context = len(hunk.old_lines) + len(hunk.new_lines) - len(lines)
    if context == lead + trail:  # (a hunk of context only counts its lines twice: not here)
        # One run of changes between the leading and trailing context (most hunks): its added
        # lines become the removed ones, then its removed lines the added ones.
        end = len(lines) - trail
        run = lines[lead:end]
        return (
            *lines[:lead],
            *[(REMOVED, text) for kind, text in run if kind == ADDED],
            *[(ADDED, text) for kind, text in run if kind == REMOVED],
            *lines[end:],
        )
    swap = {REMOVED: ADDED, ADDED: REMOVED, CONTEXT: CONTEXT}
    return _reorder_reversed(tuple([(swap[k], t) for k, t in lines]))


def _reorder_reversed(lines: tuple[tuple[int, bytes], ...]) -> tuple[tuple[int, bytes], ...]:
    """Within each run of changes, put removed lines before added ones (diff's canonical order)."""
    out: list[tuple[int, bytes]] = []
    run_removed: list[tuple[int, bytes]] = []
    run_added: list[tuple[int, bytes]] = []
    for kind, text in (*lines, (CONTEXT, b"")):
        if kind == REMOVED:
            run_removed.append((kind, text))
        elif kind == ADDED:
            run_added.append((kind, text))
        else:
            out.extend(run_removed)
            out.extend(run_added)
            run_removed, run_added = [], []
            out.append((kind, text))
    out.pop()  # the sentinel
    return tuple(out)


@record(frozen=True, slots=True)
class FilePatch:
    """The changes to one file. ``old_path`` is None for a creation, ``new_path`` None for a deletion."""

    old_path: bytes | None
    new_path: bytes | None
    hunks: tuple[Hunk, ...]
    old_mode: int | None = None
    new_mode: int | None = None
    binary: bool = False
    rename: bool = False
    copy: bool = False
    header_line: int = 0  # line of the file's first header in the patch file (1-based)
    #: Its ``+++`` line ends in CRLF, so the CR of every line of its hunks was stripped, as GNU patch
    #: 2.7.6 strips them ("Stripping trailing CRs from patch"): said to the user once per file.
    crlf_stripped: bool = False
    #: For module-file rows (``patch_from_files``): the whole content to create, exactly.
    content: bytes | None = None

    @property
    def path(self) -> bytes:
        """The path this file patch is about, for messages: the new path unless it deletes."""
        path = self.new_path if self.new_path is not None else self.old_path
        assert path is not None  # parse never builds a file patch with neither side
        return path

    @property
    def action(self) -> FileAction:
        if self.old_path is None:
            return "create"
        if self.new_path is None:
            return "delete"
        if self.rename or self.copy:
            return "rename" if self.rename else "copy"
        return "modify"

    def reversed(self) -> FilePatch:
        """The file patch that undoes this one (a creation becomes a deletion, a rename goes back)."""
        if self.copy:
            # Undoing a copy is deleting the copy; its content is what the hunks produce, which we
            # cannot know without the source, so the reverse is expressed on the copy alone.
            return FilePatch(
                old_path=self.new_path,
                new_path=None,
                hunks=tuple(h.reversed() for h in self.hunks),
                old_mode=self.new_mode,
                new_mode=None,
                header_line=self.header_line,
            )
        return FilePatch(
            old_path=self.new_path,
            new_path=self.old_path,
            hunks=tuple(h.reversed() for h in self.hunks),
            old_mode=self.new_mode,
            new_mode=self.old_mode,
            binary=self.binary,
            rename=self.rename,
            header_line=self.header_line,
            crlf_stripped=self.crlf_stripped,
            content=self.content,
        )


@record(frozen=True, slots=True)
class Patch:
    """A parsed patch file (or a module-file row): its file patches in order and the text before them."""

    name: str
    files: tuple[FilePatch, ...]
    preamble: bytes = b""
    #: True for a module-file row built by ``patch_from_files`` (creations with whole contents).
    module_files: bool = field(default=False)

    def reversed(self) -> Patch:
        """The patch that undoes this one: file patches reversed, in reverse order."""
        return Patch(
            name=self.name,
            files=tuple(f.reversed() for f in reversed(self.files)),
            preamble=self.preamble,
            module_files=self.module_files,
        )

    @property
    def hunk_count(self) -> int:
        return sum(len(f.hunks) for f in self.files)


def split_lines(data: bytes) -> list[bytes]:
    """Split on ``\\n`` only, keeping each ending (GNU patch's notion of a line: a lone ``\\r`` is data)."""
    if not data:
        return []
    if b"\r" not in data:
        # bytes.splitlines splits on \n, \r and \r\n only; without \r it is exactly our rule, in C.
        return data.splitlines(keepends=True)
    lines = data.split(b"\n")
    last = lines.pop()
    out = [line + b"\n" for line in lines]
    if last:
        out.append(last)
    return out


def strip_path(raw: bytes, strip: int, *, patch: str, line: int) -> bytes | None:
    """Apply ``-p<strip>`` to a header name; None for ``/dev/null``. Refuses names escaping the tree."""
    name = raw.split(b"\t", 1)[0].rstrip(b"\r\n")
    if name.startswith(b'"'):
        name = _unquote_c(name, patch=patch, line=line)
    elif name.endswith(b" ") and b"\t" not in raw:
        name = name.rstrip(b" ")
    if name == DEV_NULL:
        return None
    if not name:
        raise PatchParseError(patch, line, "empty file name in header")
    rest = name
    for _ in range(strip):
        slash = rest.find(b"/")
        if slash < 0:
            raise PatchParseError(
                patch,
                line,
                f"file name {_show(name)} has fewer than {strip} leading directories to strip (-p{strip})",
                hint="check the series' path convention (-p level)",
            )
        rest = rest[slash + 1 :].lstrip(b"/")
    check_relative_path(rest, patch=patch, line=line)
    return rest


def check_relative_path(path: bytes, *, patch: str, line: int | None) -> None:
    """A patched path must stay inside the tree: not absolute, no ``..`` component, not empty."""
    if not path or path.startswith(b"/"):
        raise PatchParseError(
            patch, line, f"file name {_show(path)} is absolute or empty: it would escape the tree"
        )
    parts = path.split(b"/")
    if any(part == b".." for part in parts):
        raise PatchParseError(
            patch, line, f"file name {_show(path)} contains '..': it would escape the tree"
        )
    if b"\0" in path:
        raise PatchParseError(patch, line, f"file name {_show(path)} contains a NUL byte")


_ESCAPES = {
    ord("a"): 7,
    ord("b"): 8,
    ord("t"): 9,
    ord("n"): 10,
    ord("v"): 11,
    ord("f"): 12,
    ord("r"): 13,
    ord('"'): 34,
    ord("\\"): 92,
}


def _unquote_c(name: bytes, *, patch: str, line: int) -> bytes:
    """Undo git's C-style quoting of a path (``"a/caf\\303\\251.py"``), byte for byte."""
    end = name.rfind(b'"')
    if end <= 0:
        raise PatchParseError(patch, line, f"unterminated quoted file name {_show(name)}")
    body = name[1:end]
    out = bytearray()
    i = 0
    while i < len(body):
        byte = body[i]
        if byte != 0x5C:
            out.append(byte)
            i += 1
            continue
        nxt = body[i + 1 : i + 2]
        if not nxt:
            raise PatchParseError(patch, line, f"bad escape in quoted file name {_show(name)}")
        if nxt in b"01234567":
            octal = body[i + 1 : i + 4]
            out.append(int(octal, 8) & 0xFF)
            i += 4
        elif nxt[0] in _ESCAPES:
            out.append(_ESCAPES[nxt[0]])
            i += 2
        else:
            raise PatchParseError(patch, line, f"bad escape in quoted file name {_show(name)}")
    return bytes(out)


def _show(data: bytes) -> str:
    return data.decode("utf-8", errors="backslashreplace")


def _git_names(line: bytes) -> tuple[bytes, bytes] | None:
    """The two names of a ``diff --git a/x b/x`` line (None when they cannot be split unambiguously)."""
    rest = line[len(b"diff --git ") :].rstrip(b"\r\n")
    if rest.startswith(b'"'):
        close = rest.find(b'" ', 1)
        if close < 0:
            return None
        return rest[: close + 1], rest[close + 2 :]
    if rest.endswith(b'"'):
        open_ = rest.rfind(b' "')
        if open_ < 0:
            return None
        return rest[:open_], rest[open_ + 1 :]
    # Unquoted: the two names are equal in the common case, so split at the middle space.
    half = len(rest) // 2
    if len(rest) % 2 == 1 and rest[half : half + 1] == b" ":
        left, right = rest[:half], rest[half + 1 :]
        if left.split(b"/", 1)[-1] == right.split(b"/", 1)[-1]:
            return left, right
    parts = rest.split(b" ")
    if len(parts) == 2:
        return parts[0], parts[1]
    return None


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


_GIT_EXTENDED = (
    b"old mode ",
    b"new mode ",
    b"deleted file mode ",
    b"new file mode ",
    b"rename from ",
    b"rename to ",
    b"rename old ",
    b"rename new ",
    b"copy from ",
    b"copy to ",
    b"similarity index ",
    b"dissimilarity index ",
    b"index ",
    b"Binary files ",
    b"GIT binary patch",
)


def _mode(value: bytes, *, patch: str, line: int) -> int:
    value = value.strip()
    if not _MODE.match(value):
        raise PatchParseError(
            patch, line, f"bad file mode {_show(value)!r} (expected six octal digits)"
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
    head = _GitHeader(line=start + 1, names=_git_names(lines[start]))
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
    label = _show(head.names[1]) if head.names else f"line {head.line}"
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
        src_path = _strip_git_name(src, strip, patch=name, line=head.line)
        dst_path = _strip_git_name(dst, strip, patch=name, line=head.line)
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


def _strip_git_name(raw: bytes, strip: int, *, patch: str, line: int) -> bytes:
    """Names in ``rename from`` lines have no ``a/`` prefix: strip one level fewer."""
    name = _unquote_c(raw, patch=patch, line=line) if raw.startswith(b'"') else raw
    rest = name
    for _ in range(max(strip - 1, 0)):
        slash = rest.find(b"/")
        if slash < 0:
            raise PatchParseError(patch, line, f"file name {_show(name)} too short for -p{strip}")
        rest = rest[slash + 1 :]
    check_relative_path(rest, patch=patch, line=line)
    return rest


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
            raise PatchParseError(
                name, i + 1, f"malformed hunk header {_show(lines[i].rstrip())!r}"
            )
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
                name, header, f"line numbers too large in {_show(lines[i].rstrip(_EOL))!r}"
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
                    f"malformed hunk #{number}: line {_show(line.rstrip(_EOL))!r} is not "
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
                f"(line {_show(lines[i].rstrip(_EOL))!r} follows it)",
            )
        if old_len == 0 and new_len == 0:
            raise PatchParseError(
                name, header, f"hunk #{number} is empty (@@ -{old_start},0 +{new_start},0 @@)"
            )
        prefix = first_change if first_change >= 0 else len(body)
        suffix = len(body) - 1 - last_change if last_change >= 0 else len(body)
        hunks.append(
            _parsed_hunk(
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


def _parsed_hunk(
    number: int,
    old_start: int,
    old_len: int,
    new_start: int,
    new_len: int,
    lines: tuple[tuple[int, bytes], ...],
    patch_line: int,
    old: tuple[bytes, ...],
    new: tuple[bytes, ...],
    prefix: int,
    suffix: int,
) -> Hunk:
    """A Hunk whose derived fields the parser already computed (skips ``__post_init__``'s pass)."""
    hunk = object.__new__(Hunk)
    set_ = object.__setattr__
    set_(hunk, "number", number)
    set_(hunk, "old_start", old_start)
    set_(hunk, "old_len", old_len)
    set_(hunk, "new_start", new_start)
    set_(hunk, "new_len", new_len)
    set_(hunk, "lines", lines)
    set_(hunk, "patch_line", patch_line)
    set_(hunk, "old_lines", old)
    set_(hunk, "new_lines", new)
    set_(hunk, "prefix_context", prefix)
    set_(hunk, "suffix_context", suffix)
    set_(hunk, "anchor", _anchor(old))
    return hunk


def _anchor(old: tuple[bytes, ...]) -> int:
    """The preimage line placement scans for: the longest, usually the most distinctive."""
    if not old:
        return 0
    lengths = list(map(len, old))
    return lengths.index(max(lengths))


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

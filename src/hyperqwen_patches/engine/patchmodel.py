"""A parsed patch as data: ``Patch`` → ``FilePatch`` → ``Hunk``, the line kinds, and GNU patch's notion
of a line (``split_lines``).

Built by the scanner (``patchscan.py``); read by placement, apply, reverse and every stage above. Pure
data on bytes: no disk, no git.
"""

from __future__ import annotations

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


def parsed_hunk(
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

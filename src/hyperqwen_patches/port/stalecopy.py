"""A copied body that went stale: a row's function that copies one of the release's, which the new
release then changed.

An override that copies a base-class method's body and changes a line of it is a common way to patch
vLLM. When the next release changes the base method (a call added, an argument renamed), a three-way
merge of the row carries the old copy over cleanly: nothing conflicts, and the override silently keeps
the old behaviour (issue #37: two rows of a real series were ported wrong this way, and no peer tool
says a word). This module finds such copies and shows both sides.

A **copy** is a function or method the row adds (its ``def`` line is one of the row's lines, or
``ADDED_SHARE`` of its lines are) whose lines, compared stripped of indentation and without blank
lines, are a near-verbatim copy of a function of the old release: at least ``COPY_SHARE`` of the
copy's lines are the original's, in order, at least ``ORIGINAL_SHARE`` of the original's lines are in
the copy, and at least ``MIN_LINES`` lines match. The original is looked for among every function of
the package (a base class's method is the usual one; a same-named function wins a tie). It has gone
**stale** when the new release's version of it (same file, same qualified name) differs from the old
one other than in indentation and blank lines, or is gone. The report gives the upstream diff of the
original (old -> new, with the file's line numbers) and the copy's lines that still hold what
upstream changed, with what upstream has instead.

The search is bounded: :class:`CopyIndex` maps every distinctive line (``DISTINCT_CHARS`` or more
characters once stripped) of the old release's Python files to the files holding it, built once per
rebase on first use; a copy is compared only with the functions of the few files that hold most of its
distinctive lines. Pure: readers in, records out.
"""

from __future__ import annotations

import ast
import re
import zlib
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from difflib import SequenceMatcher
from typing import Any, Literal, Protocol

from hyperqwen_patches.console import show
from hyperqwen_patches.engine.patchmodel import ADDED, Patch, split_lines
from hyperqwen_patches.records import field, record
from hyperqwen_patches.statics.analysis import no_gc, quiet

Reader = Callable[[bytes], bytes | None]
# (content, path) -> its module, None when it does not parse: ``verify.ParseStore.tree`` shares the
# parse of a written file with the row's static checks.
Parser = Callable[[bytes, bytes], ast.Module | None]

# Measured on the real wheels (docs/static-checks.md, "Copied bodies that went stale"): 3,108
# functions of 300 files of 0.31.0 searched in 0.30.0 found 659 copies in other files, and the 65 of
# them read were all real copies (vendored kernels, model boilerplate), none an accident.
MIN_LINES = 5  # matched lines, at least: shorter functions are alike by accident
COPY_SHARE = 0.8  # of the copy's lines that are the original's
ORIGINAL_SHARE = 0.5  # of the original's lines that are in the copy (a copy of a part still counts)
ADDED_SHARE = 0.8  # of a function's lines the row wrote, for a function whose def line it kept
DISTINCT_CHARS = 12  # a stripped line this long says something about where it came from
CANDIDATE_FILES = 8  # files compared in full per copy, those holding most of its distinct lines
MIN_DISTINCT = 3  # distinct lines a copy needs to be looked for at all
# An override of a base-class method of the same name that holds most of that method's lines is a
# copy of it plus the row's own additions, however much it adds: the lower bar below. Seen in the
# port benchmark: a 4-line base body copied into a 6-line override (with one renamed attribute).
OVERRIDE_MIN_LINES = 3
OVERRIDE_ORIGINAL_SHARE = 0.75  # of the base method's lines that are in the override


@record(frozen=True)
class Function:
    """A function or method of a file: where it is, and its lines stripped (blank lines left out)."""

    path: bytes
    qualname: str  # Class.method, outer.inner
    name: str
    first: int  # the ``def`` line (decorators excluded)
    last: int
    bases: tuple[str, ...]  # the enclosing class's base names (last component), for methods
    lines: tuple[tuple[int, bytes], ...]  # (line number, stripped text), non-blank, first..last

    @property
    def texts(self) -> list[bytes]:
        return [t for _, t in self.lines]


@record(frozen=True)
class StaleLine:
    """A line of the copy that holds what upstream changed in the original."""

    line: int  # in the copy's file, as given
    text: bytes  # the copy's line, stripped of its indentation
    # "changed": upstream replaced it with ``upstream``; "removed": upstream dropped it; "missing":
    # upstream added ``upstream`` right after the original's version of this line
    kind: Literal["changed", "removed", "missing"]
    upstream: tuple[bytes, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "text": show(self.text),
            "kind": self.kind,
            "upstream": [show(u) for u in self.upstream],
        }


@record(frozen=True)
class StaleCopy:
    """A function the row adds that copies one the new release changed."""

    path: bytes
    qualname: str
    line: int  # the copy's ``def`` line
    original_path: bytes
    original_qualname: str
    original_line: int  # on the old release
    original_new_line: int | None  # on the new release; None: gone from that file
    share: float  # of the copy's lines that are the original's
    overrides: bool  # the original is a method of a base the copy's class names
    upstream_diff: bytes  # the original, old release -> new release (unified, file line numbers)
    stale_lines: tuple[StaleLine, ...]

    @property
    def message(self) -> str:
        how = "overrides and copies" if self.overrides else "copies"
        where = f"{show(self.original_path)}:{self.original_line}"
        changed = (
            "which the new release removed"
            if self.original_new_line is None
            else "which the new release changed"
        )
        still = (
            f"; the copy still has the old version of {len(self.stale_lines)} of the changed lines"
            if self.stale_lines
            else ""
        )
        return (
            f"{self.qualname} {how} {self.original_qualname} ({where}; {round(self.share * 100)}% "
            f"of the copy's lines are the original's), {changed}{still}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "path": show(self.path),
            "qualname": self.qualname,
            "line": self.line,
            "original": {
                "path": show(self.original_path),
                "qualname": self.original_qualname,
                "line": self.original_line,
                "new_line": self.original_new_line,
            },
            "share": round(self.share, 3),
            "overrides": self.overrides,
            "message": self.message,
            "upstream_diff": show(self.upstream_diff),
            "stale_lines": [s.to_json() for s in self.stale_lines],
        }


def parse(data: bytes, path: bytes) -> ast.Module | None:
    try:
        with no_gc(), quiet():
            return ast.parse(data)
    except (SyntaxError, ValueError):
        return None


def functions(data: bytes, path: bytes, parser: Parser = parse) -> list[Function]:
    """Every function and method of a file (nested ones too); [] when it does not parse."""
    tree = parser(data, path)
    if tree is None:
        return []
    lines = split_lines(data)
    out: list[Function] = []

    def walk(body: Sequence[ast.stmt], prefix: str, bases: tuple[str, ...]) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                names = tuple(_last_name(b) for b in node.bases)
                walk(node.body, f"{prefix}{node.name}.", names)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                last = node.end_lineno or node.lineno
                stripped = tuple(
                    (n, s)
                    for n in range(node.lineno, last + 1)
                    if n <= len(lines) and (s := lines[n - 1].strip())
                )
                out.append(
                    Function(
                        path, prefix + node.name, node.name, node.lineno, last, bases, stripped
                    )
                )
                walk(node.body, f"{prefix}{node.name}.", ())
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                for block in (
                    node.body,
                    getattr(node, "orelse", []),
                    getattr(node, "finalbody", []),
                ):
                    walk(block, prefix, bases)
                for handler in getattr(node, "handlers", []):
                    walk(handler.body, prefix, bases)

    walk(tree.body, "", ())
    return out


def _last_name(node: ast.expr) -> str:
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def line_key(line: bytes) -> int:
    """A stripped line's key in the index: CRC-32, the same in every process (Python's own hash()
    is salted per process, so an index keyed by it could not be kept). A collision costs a
    comparison, never a wrong answer: the index only narrows the search."""
    return zlib.crc32(line)


class LineIndex:
    """Which files (by number) hold each distinctive line (by :func:`line_key`), packed in one
    sorted array of ``key << 32 | file``: the files of a key are one contiguous run, found by two
    bisections. Packed, it is written to the cache and read back in milliseconds; building it reads
    the whole release (~0.5 s for vLLM's 2,512 modules, once per release: see
    port/copyindexcache.py)."""

    FORMAT = b"hqp-copy-index 2\n"

    def __init__(self, pairs: array[int]) -> None:
        self.pairs = pairs

    @classmethod
    def build(cls, read: Reader, paths: Sequence[bytes]) -> LineIndex:
        pairs: list[int] = []
        # Every step per line is a C call (map over bytes methods, set building): a Python loop
        # over vLLM's ~800,000 lines costs twice as much. Hundreds of thousands of ints, none
        # garbage: collecting while they are made costs more than making them.
        with no_gc():
            for i, path in enumerate(paths):
                data = read(path)
                if data is None:
                    continue
                stripped = set(map(bytes.strip, data.splitlines()))
                keys = set(map(line_key, [s for s in stripped if len(s) >= DISTINCT_CHARS]))
                pairs.extend([k << 32 | i for k in keys])
            pairs.sort()
        return cls(array("Q", pairs))

    def files_with(self, key: int) -> Sequence[int]:
        low = bisect_left(self.pairs, key << 32)
        high = bisect_left(self.pairs, (key + 1) << 32, low)
        return [pair & 0xFFFFFFFF for pair in self.pairs[low:high]]

    def to_bytes(self, paths: Sequence[bytes]) -> bytes:
        listing = b"\0".join(paths)
        sizes = b"%d %d\n" % (len(listing), len(self.pairs))
        return b"".join([self.FORMAT, sizes, listing, self.pairs.tobytes()])

    @classmethod
    def from_bytes(cls, data: bytes, paths: Sequence[bytes]) -> LineIndex | None:
        """The index kept in ``data``, if it is one of this format for exactly ``paths``."""
        if not data.startswith(cls.FORMAT):
            return None
        try:
            head, _, rest = data[len(cls.FORMAT) :].partition(b"\n")
            listed, npairs = (int(x) for x in head.split())
            if rest[:listed] != b"\0".join(paths):
                return None
            body = memoryview(rest)[listed:]
            pairs = array("Q")
            if len(body) != pairs.itemsize * npairs:
                return None
            pairs.frombytes(body)
        except ValueError:
            return None
        return cls(pairs)


class IndexStore(Protocol):
    """Where a release's :class:`LineIndex` is kept between runs (port/copyindexcache.py)."""

    def load(self, paths: Sequence[bytes]) -> LineIndex | None: ...

    def save(self, index: LineIndex, paths: Sequence[bytes]) -> None: ...


class CopyIndex:
    """The functions of one release (the old one), found by their distinctive lines.

    Built on first use (one read and split of every file, no parse); a file's functions are parsed
    when a copy's lines lead to it, and kept.
    """

    def __init__(
        self,
        read: Reader,
        paths: Iterable[bytes] | Callable[[], Iterable[bytes]],
        store: IndexStore | None = None,
    ) -> None:
        self.read = read
        # A callable is asked on first use: listing a release (a directory walk) is not free, and
        # most rebases never look for a copy.
        self._paths_of = paths if callable(paths) else (lambda: paths)
        self._paths: list[bytes] | None = None
        self._lines: LineIndex | None = None
        self._store = store
        self._functions: dict[bytes, list[Function]] = {}
        self.parsed = 0  # files parsed (the cost of a search)

    @property
    def paths(self) -> list[bytes]:
        if self._paths is None:
            self._paths = sorted(p for p in self._paths_of() if p.endswith(b".py"))
        return self._paths

    def _index(self) -> LineIndex:
        if self._lines is None:
            found = self._store.load(self.paths) if self._store is not None else None
            if found is None:
                found = LineIndex.build(self.read, self.paths)
                if self._store is not None:
                    self._store.save(found, self.paths)
            self._lines = found
        return self._lines

    def keep_ready(self) -> bool:
        """Build and keep the index now if it can be kept (a store) and is not kept yet: a rebase
        that pauses does this before it exits when a later row may add functions, so the
        ``--continue`` that checks that row reads the index instead of the whole release. True when
        it was built here."""
        if self._lines is not None or self._store is None:
            return False
        found = self._store.load(self.paths)
        if found is not None:
            self._lines = found
            return False
        self._index()
        return True

    def candidate_files(self, texts: Iterable[bytes]) -> list[bytes]:
        """The files holding most of these lines' distinctive ones, most first."""
        distinct = {line_key(t) for t in texts if len(t) >= DISTINCT_CHARS}
        if len(distinct) < MIN_DISTINCT:
            return []
        index = self._index()
        counts: Counter[int] = Counter()
        for h in distinct:
            counts.update(index.files_with(h))
        wanted = max(MIN_DISTINCT, len(distinct) * COPY_SHARE / 2)
        return [self.paths[i] for i, n in counts.most_common(CANDIDATE_FILES) if n >= wanted]

    def functions(self, path: bytes) -> list[Function]:
        if path not in self._functions:
            data = self.read(path)
            self.parsed += data is not None
            self._functions[path] = [] if data is None else functions(data, path)
        return self._functions[path]


@record
class _Match:
    original: Function
    matched: int
    share: float
    blocks: list[tuple[int, int, int]] = field(default_factory=list)  # (copy i, original j, n)


def _match(copy: Function, original: Function, *, overrides: bool = False) -> _Match | None:
    a, b = copy.texts, original.texts
    if overrides:
        least = max(OVERRIDE_MIN_LINES, OVERRIDE_ORIGINAL_SHARE * len(b))
    else:
        least = max(MIN_LINES, COPY_SHARE * len(a), ORIGINAL_SHARE * len(b))
    # Most pairs are told apart by what lines they share at all, before the ordered comparison.
    if sum((Counter(a) & Counter(b)).values()) < least:
        return None
    matcher = SequenceMatcher(None, a, b, autojunk=False)
    blocks = [(i, j, n) for i, j, n in matcher.get_matching_blocks() if n]
    matched = sum(n for _, _, n in blocks)
    if matched < least:
        return None
    return _Match(original, matched, matched / len(a), blocks)


def added_functions(
    data: bytes, path: bytes, added: Collection[int], parser: Parser = parse
) -> list[Function]:
    """The functions a row wrote into ``data`` (``added``: the row's line numbers), outermost only."""
    chosen: list[Function] = []
    if len(added) < ADDED_SHARE * MIN_LINES and not _adds_a_def(data, added):
        return chosen  # no function of copy size can be the row's: the file is not parsed
    for fn in functions(data, path, parser):
        if any(c.first <= fn.first and fn.last <= c.last for c in chosen):
            continue  # inside a function already taken: the outer one is the copy
        mine = sum(1 for n, _ in fn.lines if n in added)
        if fn.first in added or (fn.lines and mine >= ADDED_SHARE * len(fn.lines)):
            chosen.append(fn)
    return chosen


def may_add_functions(patch: Patch) -> bool:
    """Whether ``patch`` may add a function a copy is looked for (a ``def`` line among its added
    lines, or a whole Python module): a cheap over-estimate, read before the files are written."""
    for fp in patch.files:
        path = fp.new_path or b""
        if not path.endswith(b".py"):
            continue
        if fp.content is not None and _DEF.search(fp.content):
            return True
        for hunk in fp.hunks:
            if any(k == ADDED and t.lstrip().startswith(_DEF_STARTS) for k, t in hunk.lines):
                return True
    return False


_DEF_STARTS = (b"def ", b"async def ")
_DEF = re.compile(rb"^[ \t]*(?:async[ \t]+)?def ", re.MULTILINE)


def _adds_a_def(data: bytes, added: Collection[int]) -> bool:
    lines = split_lines(data)
    return any(lines[n - 1].lstrip().startswith(_DEF_STARTS) for n in added if n <= len(lines))


def find_copy(copy: Function, index: CopyIndex) -> _Match | None:
    """The function of the old release ``copy`` copies, if any (the best match)."""
    best: tuple[tuple[int, float, bool, int], _Match] | None = None
    for path in index.candidate_files(copy.texts):
        for original in index.functions(path):
            if original.path == copy.path and original.qualname == copy.qualname:
                continue  # the row's rewrite of a function in place is not a copy of it
            overrides = _overrides(copy, original)
            got = _match(copy, original, overrides=bool(overrides))
            if got is None:
                continue
            rank = (
                overrides,
                round(got.share + got.matched / len(original.lines), 2),
                original.name == copy.name,
                _nearness(copy.path, original.path),
            )
            if best is None or rank > best[0]:
                best = (rank, got)
    return None if best is None else best[1]


def _nearness(a: bytes, b: bytes) -> int:
    """Folders two paths share: of two equal copies (vLLM's models repeat boilerplate), the one
    nearest the row's file is the likelier original."""
    n = 0
    for x, y in zip(a.split(b"/")[:-1], b.split(b"/")[:-1], strict=False):
        if x != y:
            break
        n += 1
    return n


def _overrides(copy: Function, original: Function) -> int:
    owner = original.qualname.rpartition(".")[0].rpartition(".")[2]
    return int(bool(owner) and owner in copy.bases and original.name == copy.name)


def stale_copies(
    added: Mapping[bytes, tuple[bytes, Collection[int]]],
    index: CopyIndex,
    new: Reader,
    parser: Parser = parse,
) -> list[StaleCopy]:
    """The row's copies of old-release functions that the new release (``new``) changed.

    ``added`` maps each file the row touches to its content with the row and the row's line
    numbers in it: on the old release, or as written on the new branch (then the lines reported
    are the branch's, where a person will read them). ``parser`` parses the row's files (a rebase
    passes its ``ParseStore.tree``, so a file the static checks parsed is not parsed again).
    """
    found: list[StaleCopy] = []
    new_functions: dict[bytes, dict[str, Function]] = {}
    for path in sorted(added):
        if not path.endswith(b".py"):
            continue
        data, lines = added[path]
        for copy in added_functions(data, path, set(lines), parser):
            if len(copy.lines) < MIN_LINES:
                continue
            match = find_copy(copy, index)
            if match is None:
                continue
            original = match.original
            if original.path not in new_functions:
                text = new(original.path)
                fns = [] if text is None else functions(text, original.path)
                new_functions[original.path] = {f.qualname: f for f in fns}
            now = new_functions[original.path].get(original.qualname)
            if now is not None and _code(now) == _code(original):
                continue  # unchanged upstream, or only re-indented or re-commented: still current
            found.append(_stale(copy, match, now, index, new))
    return found


def _code(fn: Function) -> list[bytes]:
    return [t for t in fn.texts if not t.startswith(b"#")]


def _stale(
    copy: Function, match: _Match, now: Function | None, index: CopyIndex, new: Reader
) -> StaleCopy:
    original = match.original
    old_text = index.read(original.path) or b""
    old_lines = split_lines(old_text)[original.first - 1 : original.last]
    new_lines: list[bytes] = []
    if now is not None:
        new_lines = split_lines(new(now.path) or b"")[now.first - 1 : now.last]
    diff = unified(old_lines, original.first, new_lines, now.first if now else 1, original.path)
    # The original's line j (stripped) -> the copy's line that holds it.
    in_copy: dict[int, int] = {}
    for i, j, n in match.blocks:
        for k in range(n):
            in_copy[j + k] = i + k
    stale: list[StaleLine] = []
    new_texts = now.texts if now is not None else []
    ops = SequenceMatcher(None, original.texts, new_texts, autojunk=False).get_opcodes()
    for tag, j1, j2, n1, n2 in ops:
        if tag == "equal":
            continue
        upstream = tuple(new_texts[n1:n2])
        if tag == "insert":
            if j1 - 1 in in_copy:
                line, text = copy.lines[in_copy[j1 - 1]]
                stale.append(StaleLine(line, text, "missing", upstream))
            continue
        for j in range(j1, j2):
            if j in in_copy:
                line, text = copy.lines[in_copy[j]]
                kind: Literal["changed", "removed"] = "changed" if upstream else "removed"
                stale.append(StaleLine(line, text, kind, upstream))
                upstream = ()  # said once, on the first line of the block it replaces
    return StaleCopy(
        path=copy.path,
        qualname=copy.qualname,
        line=copy.first,
        original_path=original.path,
        original_qualname=original.qualname,
        original_line=original.first,
        original_new_line=now.first if now is not None else None,
        share=match.share,
        overrides=bool(_overrides(copy, original)),
        upstream_diff=diff,
        stale_lines=tuple(stale),
    )


def unified(
    old: Sequence[bytes], old_start: int, new: Sequence[bytes], new_start: int, path: bytes
) -> bytes:
    """A unified diff of two excerpts of one file, with the file's own line numbers."""
    out = [b"--- a/" + path + b"\n", b"+++ b/" + path + b"\n"]
    matcher = SequenceMatcher(None, list(old), list(new), autojunk=False)
    for group in matcher.get_grouped_opcodes(3):
        i1, i2 = group[0][1], group[-1][2]
        j1, j2 = group[0][3], group[-1][4]
        out.append(
            b"@@ -%s +%s @@\n" % (_span(old_start + i1, i2 - i1), _span(new_start + j1, j2 - j1))
        )
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                out += [b" " + _ended(x) for x in old[a1:a2]]
                continue
            out += [b"-" + _ended(x) for x in old[a1:a2]]
            out += [b"+" + _ended(x) for x in new[b1:b2]]
    return b"".join(out) if len(out) > 2 else b""


def _span(start: int, length: int) -> bytes:
    # As diff writes it: an empty side names the line before it.
    if length == 0:
        return b"%d,0" % (start - 1)
    return b"%d" % start if length == 1 else b"%d,%d" % (start, length)


def _ended(line: bytes) -> bytes:
    return line if line.endswith(b"\n") else line + b"\n\\ No newline at end of file\n"

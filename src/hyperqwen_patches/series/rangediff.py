"""``diff OLD NEW``: review a re-cut of the series, like ``git range-diff`` but for patch files.

Two revisions of the series (two git revisions of a repository, or two directories) are read into
snapshots; rows are paired by name, unpaired rows are paired as renames when their content is the same
or close enough, and every pair is classified:

- ``unchanged``: the row's bytes are identical;
- ``positional``: only ``index`` hashes, ``@@`` line numbers (and a ``From <sha>`` line) differ;
- ``reformatted``: the same removed and added lines of the same files, written another way (a
  preamble, more or less context, another hunk split), with an interdiff of the folded texts;
- ``changed``: anything else (semantic drift), with an interdiff of the folded patch texts;
- ``added`` / ``removed``: a row on one side only;
- ``renamed``: a row whose name changed; its content is classified as above as well.

Folding is what makes the interdiff readable: a rebase onto a moved base shifts every ``@@`` header and
rewrites every ``index`` line, and showing those would drown the one line that really changed.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from hyperqwen_patches import gitrun
from hyperqwen_patches.console import show
from hyperqwen_patches.errors import GitError, UsageError
from hyperqwen_patches.records import field, record, replace

RowKind = Literal["patch", "files"]


@record(frozen=True)
class SeriesRow:
    """One row of a series revision, as ``diff`` compares it."""

    name: str
    position: int  # 1-based place in the apply order
    kind: RowKind  # a patch file, or a set of module files copied into the tree
    path: bytes  # the patch file, or the directory holding the module files
    content: bytes = b""  # the patch file's bytes (kind "patch")
    files: Mapping[bytes, bytes] = field(default_factory=dict)  # path -> bytes (kind "files")
    metadata: Mapping[str, str] = field(default_factory=dict)  # manifest fields, as text


@record(frozen=True)
class SeriesSnapshot:
    """A series revision: its rows in apply order, where it came from, and its pin if it states one."""

    label: str
    rows: tuple[SeriesRow, ...]
    pin: str | None = None


Status = Literal["unchanged", "positional", "reformatted", "changed", "added", "removed", "renamed"]
STATUSES: tuple[Status, ...] = (
    "unchanged", "positional", "reformatted", "changed", "added", "removed", "renamed"
)  # fmt: skip
# How two texts of one row's patch differ: the one rule `diff`, `export` and `check` all use
# (exportplan.classify names "none" "unchanged" and adds files that appear or go).
PatchDrift = Literal["none", "positional", "format", "semantic"]

# How similar two unpaired rows' folded contents must be to count as one row renamed (range-diff pairs
# by a creation-cost matrix; a ratio over folded lines is the same idea without the matrix).
RENAME_SIMILARITY = 0.6

_HUNK_HEADER = re.compile(rb"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")
_INDEX_LINE = re.compile(
    rb"^index [0-9a-fA-F]+\.\.[0-9a-fA-F]+(?P<mode> [0-7]{6})?(?P<eol>\r?\n?)$"
)
_FROM_LINE = re.compile(rb"^From [0-9a-f]{40} ")
_SUBJECT_NUMBER = re.compile(rb"^(Subject: \[[^\]]*?PATCH[^\]]*?) \d+/\d+\]")


def fold_positional(data: bytes) -> bytes:
    """The patch text with everything positional folded away.

    ``@@ -12,7 +12,8 @@ def f():`` becomes ``@@ def f():`` (the function context stays: it is content),
    ``index 1a2b..3c4d 100644`` becomes ``index 100644`` (the mode is content, the hashes are not), and
    a format-patch ``From <sha> <date>`` line becomes ``From``, and ``[PATCH 2/5]`` becomes ``[PATCH]``
    (the place in a format-patch run is the apply order, reported apart). Two patches whose folded texts are equal
    differ only positionally.
    """
    out: list[bytes] = []
    for line in data.splitlines(keepends=True):
        hunk = _HUNK_HEADER.match(line)
        if hunk is not None:
            out.append(b"@@" + line[hunk.end() :])
            continue
        index = _INDEX_LINE.match(line)
        if index is not None:
            out.append(b"index" + (index.group("mode") or b"") + index.group("eol"))
            continue
        if _FROM_LINE.match(line) is not None:
            out.append(b"From\n")
            continue
        subject = _SUBJECT_NUMBER.match(line)
        if subject is not None:
            out.append(subject.group(1) + b"]" + line[subject.end() :])
            continue
        out.append(line)
    return b"".join(out)


REGULAR_MODE = 0o100644  # git's mode of a regular, non-executable file


def changes_of(data: bytes) -> tuple[object, ...] | None:
    """What a patch changes, with its format folded away: per file its paths and modes and, in
    order, each run of removed and added lines with the context line right above and right below it
    (what anchors it: the same text inserted elsewhere is another change). The preamble (prose,
    header lines, export marker, diffstat), how much context there is beyond those neighbours, how
    the changes are split into hunks, ``index`` lines and ``@@`` numbers all drop out. None: not a
    patch."""
    from hyperqwen_patches.engine.patchmodel import CONTEXT, PatchParseError
    from hyperqwen_patches.engine.patchscan import parse_patch

    try:
        patch = parse_patch(data, name="")
    except PatchParseError:
        return None
    out: list[object] = []
    for fp in patch.files:
        runs: list[tuple[bytes | None, tuple[tuple[int, bytes], ...], bytes | None]] = []
        for hunk in fp.hunks:
            before: bytes | None = None
            run: list[tuple[int, bytes]] = []
            for kind, text in hunk.lines:
                if kind == CONTEXT:
                    if run:
                        runs.append((before, tuple(run), text))
                        run = []
                    before = text
                    continue
                run.append((kind, text))
            if run:  # a change at the hunk's end: nothing below it (the end of the file)
                runs.append((before, tuple(run), None))
        old_mode, new_mode = fp.old_mode, fp.new_mode
        # A plain diff states no mode: the file it creates is a regular one (GNU patch and the
        # engine write 0644; git writes `new file mode 100644` for it), and the file it deletes is
        # gone whatever its mode was. Neither is a change of the export's `mode` lines.
        if fp.old_path is None and new_mode is None:
            new_mode = REGULAR_MODE
        if fp.new_path is None:
            old_mode = None
        out.append((fp.old_path, fp.new_path, old_mode, new_mode, fp.binary, tuple(runs)))
    return tuple(out)


def _lines(data: bytes) -> list[bytes]:
    """Lines for difflib: each ends in a newline, a missing final one marked as diff marks it."""
    lines = data.splitlines(keepends=True)
    if lines and not lines[-1].endswith(b"\n"):
        lines[-1] += b"\n\\ No newline at end of file\n"
    return lines


def unified(old: bytes, new: bytes, old_label: bytes, new_label: bytes, context: int = 3) -> bytes:
    """A unified diff of two byte strings (empty when they are equal)."""
    if old == new:
        return b""
    return b"".join(
        difflib.diff_bytes(
            difflib.unified_diff,
            _lines(old),
            _lines(new),
            fromfile=old_label,
            tofile=new_label,
            n=context,
            lineterm=b"\n",
        )
    )


def patch_drift(old: bytes, new: bytes) -> PatchDrift:
    """none (the same bytes) / positional (only ``index`` hashes and ``@@`` numbers moved:
    :func:`fold_positional`) / format (the same runs of removed and added lines of the same files,
    written another way: :func:`changes_of`) / semantic."""
    if old == new:
        return "none"
    if fold_positional(old) == fold_positional(new):
        return "positional"
    same = changes_of(old)
    return "format" if same is not None and same == changes_of(new) else "semantic"


def _row_text(row: SeriesRow) -> bytes:
    """One comparable text per row: the patch file, or the module files one after another."""
    if row.kind == "patch":
        return row.content
    return b"".join(b"=== " + path + b"\n" + row.files[path] for path in sorted(row.files))


@record(frozen=True)
class RowDiff:
    """One row of the comparison."""

    status: Status
    old: SeriesRow | None
    new: SeriesRow | None
    drift: PatchDrift
    interdiff: bytes = b""
    metadata_changes: tuple[tuple[str, str, str], ...] = ()  # (field, old, new)
    similarity: float | None = None  # renames only
    # The row's place in the apply order changed relative to the other rows both sides share.
    moved: bool = False

    @property
    def name(self) -> str:
        row = self.new if self.new is not None else self.old
        assert row is not None
        return row.name

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "drift": self.drift,
            "old_name": self.old.name if self.old else None,
            "new_name": self.new.name if self.new else None,
            "old_path": show(self.old.path) if self.old else None,
            "new_path": show(self.new.path) if self.new else None,
            "old_position": self.old.position if self.old else None,
            "new_position": self.new.position if self.new else None,
            "moved": self.moved,
            "similarity": None if self.similarity is None else round(self.similarity, 3),
            "metadata_changes": [
                {"field": f, "old": o, "new": n} for f, o, n in self.metadata_changes
            ],
            "interdiff": show(self.interdiff),
        }


@record(frozen=True)
class SeriesDiff:
    """The comparison of two series revisions: one record per row, old order then additions."""

    old_label: str
    new_label: str
    old_pin: str | None
    new_pin: str | None
    rows: tuple[RowDiff, ...]
    counts: Mapping[str, int] = field(default_factory=dict)

    @property
    def semantic(self) -> bool:
        """Whether anything beyond positional drift changed (what a reviewer must read)."""
        return any(
            r.status in ("changed", "added", "removed") or r.drift == "semantic" for r in self.rows
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "old": self.old_label,
            "new": self.new_label,
            "old_pin": self.old_pin,
            "new_pin": self.new_pin,
            "rows": [r.to_json() for r in self.rows],
            "counts": dict(self.counts),
            "semantic": self.semantic,
        }


def _similarity(a: bytes, b: bytes) -> float:
    matcher = difflib.SequenceMatcher(None, a.splitlines(), b.splitlines(), autojunk=False)
    if matcher.real_quick_ratio() < RENAME_SIMILARITY or matcher.quick_ratio() < RENAME_SIMILARITY:
        return 0.0
    return matcher.ratio()


def _metadata_changes(old: SeriesRow, new: SeriesRow) -> tuple[tuple[str, str, str], ...]:
    keys = sorted(set(old.metadata) | set(new.metadata))
    return tuple(
        (k, old.metadata.get(k, ""), new.metadata.get(k, ""))
        for k in keys
        if old.metadata.get(k, "") != new.metadata.get(k, "")
    )


def _compare(old: SeriesRow, new: SeriesRow, status: Status | None = None) -> RowDiff:
    old_text, new_text = _row_text(old), _row_text(new)
    label_old = b"old/" + old.name.encode()
    label_new = b"new/" + new.name.encode()
    drift: PatchDrift
    if old.kind != new.kind:
        drift = "semantic"
        interdiff = unified(old_text, new_text, label_old, label_new)
    elif old.kind == "patch":
        drift = patch_drift(old_text, new_text)
        interdiff = (
            b""
            if drift in ("none", "positional")
            else unified(fold_positional(old_text), fold_positional(new_text), label_old, label_new)
        )
    elif old_text == new_text:
        drift, interdiff = "none", b""
    else:  # module rows: their files compared as they are
        drift = "semantic"
        interdiff = b"".join(
            unified(
                old.files.get(p, b""),
                new.files.get(p, b""),
                b"old/" + p if p in old.files else b"/dev/null",
                b"new/" + p if p in new.files else b"/dev/null",
            )
            for p in sorted(set(old.files) | set(new.files))
        )
    if status is None:
        by_drift: dict[str, Status] = {
            "none": "unchanged",
            "positional": "positional",
            "format": "reformatted",
            "semantic": "changed",
        }
        status = by_drift[drift]
    return RowDiff(
        status=status,
        old=old,
        new=new,
        drift=drift,
        interdiff=interdiff,
        metadata_changes=_metadata_changes(old, new),
    )


def _pair_renames(
    removed: Sequence[SeriesRow], added: Sequence[SeriesRow]
) -> list[tuple[SeriesRow, SeriesRow, float]]:
    """Greedy best-first pairing of unpaired rows by folded-content similarity."""
    candidates: list[tuple[float, int, int]] = []
    for i, old in enumerate(removed):
        for j, new in enumerate(added):
            if old.kind != new.kind:
                continue
            a, b = fold_positional(_row_text(old)), fold_positional(_row_text(new))
            score = 1.0 if a == b else _similarity(a, b)
            if score >= RENAME_SIMILARITY:
                candidates.append((score, i, j))
    # Highest similarity first; ties broken by series order so the result is deterministic.
    candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
    used_old: set[int] = set()
    used_new: set[int] = set()
    pairs: list[tuple[SeriesRow, SeriesRow, float]] = []
    for score, i, j in candidates:
        if i in used_old or j in used_new:
            continue
        used_old.add(i)
        used_new.add(j)
        pairs.append((removed[i], added[j], score))
    return pairs


def _moved_rows(pairs: Iterable[tuple[SeriesRow, SeriesRow]]) -> set[str]:
    """Names (new side) of paired rows outside the longest order-preserving run of paired rows."""
    ordered = sorted(pairs, key=lambda p: p[0].position)
    seq = [p[1].position for p in ordered]
    # Longest increasing subsequence (patience); rows not in it moved.
    n = len(seq)
    best_len = [1] * n
    prev = [-1] * n
    for i in range(n):
        for j in range(i):
            if seq[j] < seq[i] and best_len[j] + 1 > best_len[i]:
                best_len[i], prev[i] = best_len[j] + 1, j
    keep: set[int] = set()
    if n:
        i = max(range(n), key=lambda k: (best_len[k], -k))
        while i != -1:
            keep.add(i)
            i = prev[i]
    return {ordered[i][1].name for i in range(n) if i not in keep}


def diff_series(old: SeriesSnapshot, new: SeriesSnapshot) -> SeriesDiff:
    """Pair and classify the rows of two series snapshots (pure: no disk, no git)."""
    new_by_name = {r.name: r for r in new.rows}
    old_names = {r.name for r in old.rows}
    paired: list[tuple[SeriesRow, SeriesRow]] = [
        (r, new_by_name[r.name]) for r in old.rows if r.name in new_by_name
    ]
    removed = [r for r in old.rows if r.name not in new_by_name]
    added = [r for r in new.rows if r.name not in old_names]
    renames = _pair_renames(removed, added)
    renamed_old = {o.name for o, _, _ in renames}
    renamed_new = {n.name for _, n, _ in renames}
    moved = _moved_rows([*paired, *((o, n) for o, n, _ in renames)])

    by_old_name: dict[str, RowDiff] = {}
    for o, n in paired:
        d = _compare(o, n)
        by_old_name[o.name] = _with_moved(d, n.name in moved)
    for o, n, score in renames:
        d = _compare(o, n, status="renamed")
        by_old_name[o.name] = _with_moved(
            RowDiff(
                status=d.status,
                old=d.old,
                new=d.new,
                drift=d.drift,
                interdiff=d.interdiff,
                metadata_changes=d.metadata_changes,
                similarity=score,
            ),
            n.name in moved,
        )
    for o in removed:
        if o.name not in renamed_old:
            by_old_name[o.name] = RowDiff(status="removed", old=o, new=None, drift="semantic")
    rows: list[RowDiff] = [by_old_name[o.name] for o in old.rows]
    rows += [
        RowDiff(status="added", old=None, new=n, drift="semantic")
        for n in new.rows
        if n.name not in old_names and n.name not in renamed_new
    ]
    counts: dict[str, int] = {s: sum(1 for r in rows if r.status == s) for s in STATUSES}
    return SeriesDiff(
        old_label=old.label,
        new_label=new.label,
        old_pin=old.pin,
        new_pin=new.pin,
        rows=tuple(rows),
        counts=counts,
    )


def _with_moved(d: RowDiff, moved: bool) -> RowDiff:
    return replace(d, moved=moved)


# --- reading a series revision from a directory or a git revision -------------------------------


class SeriesTree(Protocol):
    """Read-only view of a repository state: a directory on disk or a git revision."""

    @property
    def label(self) -> str: ...

    def read(self, path: bytes) -> bytes | None: ...

    def files(self, prefix: bytes) -> list[bytes]: ...


@record(frozen=True)
class DirTree:
    """A directory: the series as the working tree holds it."""

    root: Path
    label: str

    def read(self, path: bytes) -> bytes | None:
        target = Path(os.fsdecode(self.root)) / os.fsdecode(path)
        try:
            return target.read_bytes() if target.is_file() else None
        except OSError as exc:
            raise UsageError(f"{target}: cannot read: {exc.strerror}") from exc

    def files(self, prefix: bytes) -> list[bytes]:
        base = Path(self.root) / os.fsdecode(prefix)
        if not base.is_dir():
            return []
        found = [
            os.fsencode(p.relative_to(self.root).as_posix())
            for p in base.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        ]
        return sorted(found)


@record
class GitTree:
    """A git revision: only committed content is read (the work tree and index are never looked at)."""

    repo: Path
    rev: str
    label: str
    _listing: dict[bytes, bytes] | None = None  # path -> blob id

    def _ls(self) -> dict[bytes, bytes]:
        if self._listing is None:
            out = git_output(self.repo, "ls-tree", "-r", "-z", "--full-tree", self.rev)
            listing: dict[bytes, bytes] = {}
            for entry in out.split(b"\0"):
                if not entry:
                    continue
                meta, _, path = entry.partition(b"\t")
                _mode, kind, oid = meta.split(b" ")
                if kind == b"blob":
                    listing[path] = oid
            self._listing = listing
        return self._listing

    def read(self, path: bytes) -> bytes | None:
        oid = self._ls().get(path)
        if oid is None:
            return None
        return git_output(self.repo, "cat-file", "blob", oid.decode("ascii"))

    def files(self, prefix: bytes) -> list[bytes]:
        prefix = prefix.rstrip(b"/") + b"/" if prefix else b""
        return sorted(p for p in self._ls() if p.startswith(prefix))


def git_output(repo: Path, *args: str) -> bytes:
    """Run one read-only git command in ``repo``; stdout bytes, or GitError naming the command."""
    code, out, err = run_git(list(args), cwd=repo)
    if code != 0:
        raise GitError(
            f"git {' '.join(args)} failed in {repo}: {show(err).strip() or f'exit {code}'}"
        )
    return out


def _is_revision(repo: Path, rev: str) -> bool:
    if not (repo / ".git").exists() and not (repo / "HEAD").exists():
        return False
    if rev.startswith("-"):
        return False  # never let a revision argument be read as an option
    code, _, _ = run_git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=repo)
    return code == 0


def open_series_tree(spec: str, *, repo: Path) -> SeriesTree:
    """``dir:PATH``, ``git:REV``, or a bare argument that is a directory or a revision of ``repo``."""
    if spec.startswith("dir:"):
        path = Path(spec[4:])
        if not path.is_dir():
            raise UsageError(f"{spec}: not a directory")
        return DirTree(path, f"dir:{path}")
    if spec.startswith("git:"):
        rev = spec[4:]
        if not _is_revision(repo, rev):
            raise UsageError(f"{spec}: not a commit in {repo}")
        return GitTree(repo, rev, f"git:{rev}")
    is_dir = Path(spec).is_dir()
    is_rev = _is_revision(repo, spec)
    if is_dir and is_rev:
        raise UsageError(
            f"{spec!r} is both a directory and a git revision of {repo}",
            hint=f"say which: dir:{spec} or git:{spec}",
        )
    if is_dir:
        return DirTree(Path(spec), f"dir:{spec}")
    if is_rev:
        return GitTree(repo, spec, f"git:{spec}")
    raise UsageError(
        f"{spec!r} is neither a directory nor a git revision of {repo}",
        hint="pass a directory holding the series, or a commit, branch or tag of the repository",
    )


_PATCH_SUFFIXES = (b".patch", b".diff")


def _row_name(path: bytes) -> str:
    base = path.rsplit(b"/", 1)[-1]
    for suffix in _PATCH_SUFFIXES:
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return show(base)


def _join(directory: bytes, name: bytes) -> bytes:
    return directory + b"/" + name if directory else name


def _from_series_file(tree: SeriesTree, series_path: bytes) -> tuple[SeriesRow, ...]:
    """Rows from a quilt-style series file: one patch per line, ``#`` comments, options ignored."""
    data = tree.read(series_path)
    assert data is not None
    directory = series_path.rpartition(b"/")[0]
    rows: list[SeriesRow] = []
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(data.splitlines(), start=1):
        line = raw.split(b"#", 1)[0].strip()
        if not line:
            continue
        rel = line.split()[0]
        path = _join(directory, rel)
        content = tree.read(path)
        if content is None:
            raise UsageError(
                f"{tree.label}: {show(series_path)} line {lineno}: {show(rel)} does not exist"
            )
        name = _row_name(rel)
        if name in seen:
            raise UsageError(
                f"{tree.label}: {show(series_path)} line {lineno}: row {name!r} is listed twice "
                f"(first on line {seen[name]})"
            )
        seen[name] = lineno
        rows.append(SeriesRow(name, len(rows) + 1, "patch", path, content=content))
    return tuple(rows)


def load_snapshot(tree: SeriesTree) -> SeriesSnapshot:
    """The series of a repository state (or a bare directory of patches), rows in apply order.

    Looked up in this order: ``patches/manifest.yaml`` (the project's own layout, module-file rows and
    metadata included), a quilt ``series`` file in ``patches/`` or at the top, and last every
    ``*.patch``/``*.diff`` at the top in name order.
    """
    if tree.read(MANIFEST_PATH) is not None:
        return _from_manifest(tree)
    for series_path in (b"patches/series", b"series"):
        if tree.read(series_path) is not None:
            return SeriesSnapshot(tree.label, _from_series_file(tree, series_path))
    patch_paths = [p for p in tree.files(b"") if b"/" not in p and p.endswith(_PATCH_SUFFIXES)]
    if not patch_paths:
        raise UsageError(
            f"{tree.label}: no series here (no patches/manifest.yaml, no series file, no *.patch)"
        )
    rows = []
    for i, path in enumerate(patch_paths, start=1):
        content = tree.read(path)
        assert content is not None
        rows.append(SeriesRow(_row_name(path), i, "patch", path, content=content))
    return SeriesSnapshot(tree.label, tuple(rows))


MANIFEST_PATH = b"patches/manifest.yaml"
# Manifest fields compared between revisions. The fork commit is left out on purpose: every re-cut
# changes it, and the content comparison already says whether the row itself changed.
METADATA_FIELDS = (
    "kind",
    "what",
    "upstream",
    "cut_against",
    "cut_note",
    "retires_when",
    "export_point",
    "skip",
)


def _from_manifest(tree: SeriesTree) -> SeriesSnapshot:
    from hyperqwen_patches.series.manifest import parse_manifest
    from hyperqwen_patches.series.manifestmodel import MANIFEST_RELPATH

    data = tree.read(MANIFEST_PATH)
    assert data is not None
    manifest = parse_manifest(
        data,
        path=Path(MANIFEST_RELPATH),
        root=Path("."),
        shown=f"{tree.label}:{MANIFEST_RELPATH}",
    )
    rows: list[SeriesRow] = []
    for position, row in enumerate(manifest.rows, start=1):
        metadata = {k: getattr(row, k) or "" for k in METADATA_FIELDS}
        if row.patch is not None:
            path = os.fsencode(row.patch)
            content = tree.read(path)
            if content is None:
                raise UsageError(
                    f"{tree.label}: {MANIFEST_RELPATH} line {row.line}: row {row.name!r}: "
                    f"patch file {row.patch} does not exist"
                )
            rows.append(SeriesRow(row.name, position, "patch", path, content, metadata=metadata))
        else:
            assert row.files is not None
            directory = os.fsencode(row.files)
            files = {p[len(directory) + 1 :]: tree.read(p) or b"" for p in tree.files(directory)}
            rows.append(
                SeriesRow(row.name, position, "files", directory, files=files, metadata=metadata)
            )
    return SeriesSnapshot(tree.label, tuple(rows), pin=manifest.pin)


def run_git(args: list[str], *, cwd: Path) -> tuple[int, bytes, bytes]:
    """Through the one git runner; revisions are read from the repository named, never the cwd's."""
    result = gitrun.run(args, git_dir=gitrun.git_dir_of(cwd), cwd=cwd)
    return result.code, result.stdout, result.stderr

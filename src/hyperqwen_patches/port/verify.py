"""The static checks of one row as the rebase wrote it: the errors the row adds to the new branch.

A three-way merge can write a row that applies, compiles and still fails: an override whose
``self.selector_top_k`` the new release renamed ``self.top_k``, a call to a method that gained a
required parameter (issue #37: two such rows were ported wrong without a word). So every row the
rebase writes is checked on the files as written, against four trees:

- the old release as the series left it before the row and after it (``old_before``, ``old_after``),
  which says what the row's lines meant where they were written;
- the new branch before the row and after it as written (``new_before``, ``new_after``).

The row's lines are the lines ``new_after`` has and ``new_before`` does not, in the files the row
touches (a line diff: a merged row has no hunks to say where its lines went). Three checks:

- ``compiles``: a touched ``.py`` file that compiled on ``new_before`` (or did not exist) and does not
  compile on ``new_after`` (``compile()``, so ``return`` outside a function is caught too);
- ``names``: a name, attribute chain or import on the row's lines (``statics/refs.py``) that
  resolves on ``old_after`` and is missing on ``new_after`` (``statics/symbols.py``; unknown is never
  missing). No "pristine definitions only" filter here: a name an earlier row defined and the branch
  lost is as broken as one upstream removed;
- ``signatures``: a call on the row's lines whose callee, resolved on ``new_after``, does not bind
  (``statics/signatures.py``), where the callee resolved on ``old_after`` did. The callee is the
  branch's as written, so a row that widens a signature in its own hunk binds against the widened
  definition and is not reported (issue #38 item 9).

An error is the row's only if it is new: the same checks run on the lines the row removed, on
``old_before``/``new_before``, and an error found there (same check, file, expression and problem) is
one the branch already had; the row that carried it on is not blamed for it (it is counted).

Pure: readers in, records out; no git, no disk. :class:`RowVerifier` keeps one :class:`ParseStore`
for a whole rebase, so a module is parsed once per content, whichever row or tree reaches it.
:class:`RebaseChecks` is what a rebase holds: the verifier and ``stalecopy``'s index of the old
release, with one call per written row for both checks (docs/static-checks.md, "Checks of a written
row").
"""

from __future__ import annotations

import ast
import difflib
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from hyperqwen_patches.console import show
from hyperqwen_patches.engine.patchmodel import split_lines
from hyperqwen_patches.port.linediff import changed_lines
from hyperqwen_patches.port.stalecopy import CopyIndex, IndexStore, StaleCopy, stale_copies
from hyperqwen_patches.records import field, record
from hyperqwen_patches.statics.analysis import Analysis, StaticFinding, no_gc, quiet
from hyperqwen_patches.statics.names import BUILTINS, Views, accepted, resolve
from hyperqwen_patches.statics.provenance import Provenance
from hyperqwen_patches.statics.refs import CallRef, Ref, module_name
from hyperqwen_patches.statics.signatures import Def, bind, callee
from hyperqwen_patches.statics.symbols import (
    ClassInfo,
    Found,
    Missing,
    ModuleInfo,
    Symbols,
    Unknown,
    _module_info,
)

Reader = Callable[[bytes], bytes | None]
Check = Literal["compiles", "names", "signatures"]

# Versions of one path kept parsed: the four trees of a row (old and new, before and after); the
# next row starts from this row's two "after"s. Older versions are never asked for again.
VERSIONS_PER_PATH = 4


@record(frozen=True)
class RowError:
    """One error a written row adds to the new branch, located on the file as written."""

    check: Check
    path: bytes
    line: int
    message: str  # the problem, without positions (the same problem elsewhere has the same text)
    definition: str  # the definition the verdict rests on: "path:line" (and a signature)
    detail: str = ""  # the old side's definition, a hint

    @property
    def key(self) -> tuple[str, bytes, str]:
        """What makes two findings the same error, wherever the row moved the line."""
        return (self.check, self.path, self.message)

    def to_static(self, row: str | None) -> StaticFinding:
        """As the static checks report (``check``'s table, ``--json``)."""
        detail = "\n".join(x for x in (f"definition: {self.definition}", self.detail) if x)
        return StaticFinding(self.check, "error", row, self.path, self.line, self.message, detail)

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "path": show(self.path),
            "line": self.line,
            "message": self.message,
            "definition": self.definition,
            "detail": self.detail,
        }


@record
class RowVerdict:
    """The errors a row adds (``errors``), and what was looked at, by outcome (``stats``)."""

    row: str
    errors: list[RowError]
    stats: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_json(self) -> dict[str, Any]:
        return {
            "row": self.row,
            "errors": [e.to_json() for e in self.errors],
            "stats": dict(sorted(self.stats.items())),
        }


@record
class _Parsed:
    data: bytes
    tree: ast.Module | None
    # (line, message, source line) from the parser; the compiler's is added on first ask
    error: tuple[int, str, str] | None
    compiled: bool = False
    infos: dict[str, ModuleInfo] = field(default_factory=dict)  # by module name


class ParseStore:
    """Parsed files by content, shared by every tree of a rebase (old and new, before and after).

    A module the row does not touch has the same bytes on a row's "before" and "after" and on the
    next row's: it is parsed once per content for the whole rebase, not once per tree or row.
    """

    def __init__(self, versions_per_path: int = VERSIONS_PER_PATH) -> None:
        self._by_path: dict[bytes, list[_Parsed]] = {}
        self._versions = versions_per_path
        self.parses = 0  # files parsed (the cost; tests read it)
        self.compiles = 0

    def parsed(self, path: bytes, data: bytes) -> _Parsed:
        versions = self._by_path.setdefault(path, [])
        for i, entry in enumerate(versions):
            if entry.data is data or entry.data == data:
                if i:
                    versions.insert(0, versions.pop(i))
                return entry
        self.parses += 1
        tree: ast.Module | None = None
        error: tuple[int, str, str] | None = None
        try:
            with no_gc(), quiet():
                tree = ast.parse(data, filename=show(path))
        except SyntaxError as exc:
            error = (exc.lineno or 1, exc.msg, (exc.text or "").rstrip("\n"))
        except ValueError as exc:  # NUL bytes in the source
            error = (1, str(exc), "")
        entry = _Parsed(data, tree, error)
        versions.insert(0, entry)
        del versions[self._versions :]
        return entry

    def tree(self, data: bytes, path: bytes) -> ast.Module | None:
        """The file parsed (None when it does not parse), as ``stalecopy.Parser`` takes it."""
        return self.parsed(path, data).tree

    def compile_error(self, path: bytes, data: bytes) -> tuple[int, str, str] | None:
        """What ``compile()`` says of the file: the parser's error, else the compiler's, else None."""
        entry = self.parsed(path, data)
        if entry.tree is not None and not entry.compiled:
            entry.compiled = True
            self.compiles += 1
            try:
                # From the tree: the parse is not repeated; the symbol table pass still runs, which
                # is what catches ``return`` outside a function and a bad ``nonlocal``.
                with quiet():
                    compile(entry.tree, show(path), "exec", dont_inherit=True)
            except SyntaxError as exc:
                entry.error = (exc.lineno or 1, exc.msg, (exc.text or "").rstrip("\n"))
        return entry.error

    def module_info(self, name: str, path: bytes, data: bytes) -> ModuleInfo | None:
        entry = self.parsed(path, data)
        if entry.tree is None:
            return None
        info = entry.infos.get(name)
        if info is None:
            info = entry.infos[name] = _module_info(
                name, path, entry.tree, is_package=path.endswith(b"__init__.py")
            )
        return info


class _StoreSymbols(Symbols):
    """``Symbols`` whose modules come from a shared :class:`ParseStore`."""

    def __init__(self, read: Reader, package: str, store: ParseStore) -> None:
        super().__init__(read, package)
        self._store = store

    def module(self, name: str) -> ModuleInfo | None:
        if name in self._modules:
            return self._modules[name]
        info: ModuleInfo | None = None
        if self.in_package(name):
            base = name.replace(".", "/").encode()
            for path in (base + b".py", base + b"/__init__.py"):
                data = self.read(path)
                if data is not None:
                    info = self._store.module_info(name, path, data)
                    break
        self._modules[name] = info
        return info


class _StoreAnalysis(Analysis):
    """The marked files of one tree, parsed through the store (for ``Views.references``)."""

    def __init__(self, prov: Provenance, store: ParseStore) -> None:
        super().__init__(prov)
        self._store = store

    def tree(self, path: bytes) -> ast.Module | None:
        data = self.prov.content.get(path)
        return None if data is None else self._store.parsed(path, data).tree


class RowVerifier:
    """The static checks of written rows, one rebase long (the parse store is kept between rows)."""

    def __init__(
        self,
        package: str = "vllm",
        old_label: str = "the old release",
        new_label: str = "the new branch",
        store: ParseStore | None = None,
        accept: Iterable[str] = (),
    ) -> None:
        self.package = package
        self.old_label = old_label
        self.new_label = new_label
        self.store = store or ParseStore()
        # The manifest's accepted_names: a name a maintainer has looked at (and everything under
        # it) is not an error here either, as in ``port``'s static checks.
        self.accept = tuple(accept)

    def verify(
        self,
        row: str,
        paths: Iterable[bytes],
        old_before: Reader,
        old_after: Reader,
        new_before: Reader,
        new_after: Reader,
    ) -> RowVerdict:
        """The errors ``row`` adds to the new branch, in the ``paths`` it touches."""
        # The cyclic collector would walk every tree the store keeps, again and again, for the
        # many small objects a row's checks make (none of them garbage until the row is done):
        # 40% of the time on a 50-row rebase.
        with no_gc():
            return self._verify(row, paths, old_before, old_after, new_before, new_after)

    def _verify(
        self,
        row: str,
        paths: Iterable[bytes],
        old_before: Reader,
        old_after: Reader,
        new_before: Reader,
        new_after: Reader,
    ) -> RowVerdict:
        verdict = RowVerdict(row, [])
        stats = verdict.stats
        after_marks: dict[bytes, tuple[bytes, tuple[int, ...]]] = {}
        before_marks: dict[bytes, tuple[bytes, tuple[int, ...]]] = {}
        broken_modules: set[str] = set()
        for path in sorted(set(paths)):
            if not path.endswith(b".py"):
                continue
            after, before = new_after(path), new_before(path)
            if after is None:
                continue  # the row deletes it: nothing of the row's is left to check there
            stats["files"] += 1
            change = changed_lines(before, after)
            broken = self.store.compile_error(path, after)
            if broken is not None:
                if self.store.parsed(path, after).tree is None:
                    broken_modules.add(module_name(path))
                if before is not None and self.store.compile_error(path, before) is not None:
                    stats["pre-existing"] += 1
                else:
                    verdict.errors.append(_compile_error(path, broken, change.added))
                continue  # the compile error first: names in a file that cannot run mean little
            if change.added:
                after_marks[path] = (after, change.added)
            if before is not None and change.removed:
                before_marks[path] = (before, change.removed)
        found = self._ref_errors(row, after_marks, old_after, new_after, stats, broken_modules)
        # The same checks on the lines the row removed, one step earlier, only when there is
        # something to excuse: most rows have no error, and then this costs nothing.
        if found:
            parsed = {p: m for p, m in before_marks.items() if self.store.parsed(p, m[0]).tree}
            earlier = Counter(
                e.key
                for e in self._ref_errors(
                    row, parsed, old_before, new_before, Counter(), broken_modules
                )
            )
            for error in found:
                if earlier[error.key]:
                    earlier[error.key] -= 1
                    stats["pre-existing"] += 1
                else:
                    verdict.errors.append(error)
        verdict.errors.sort(key=lambda e: (e.path, e.line, e.check, e.message))
        return verdict

    # -- names and calls of the marked lines

    def _ref_errors(
        self,
        row: str,
        marks: dict[bytes, tuple[bytes, tuple[int, ...]]],
        old_read: Reader,
        new_read: Reader,
        stats: Counter[str],
        broken: set[str],
    ) -> list[RowError]:
        if not marks:
            return []
        prov = Provenance()
        for path, (data, lines) in marks.items():
            prov.content[path] = data
            owners: list[str | None] = [None] * len(split_lines(data))
            for line in lines:
                owners[line - 1] = row
            prov.owners[path] = owners
        old = _StoreSymbols(old_read, self.package, self.store)
        new = _StoreSymbols(new_read, self.package, self.store)
        # Views types annotated parameters on its "old" table: the branch's, so that a row without
        # errors never reaches the old side (a class the old side lacks is then looked up there as
        # a name it lacks, and skipped).
        views = Views(_StoreAnalysis(prov, self.store), new, new, self.old_label, self.new_label)
        refs, calls = views.references()
        errors = self._names(refs, old, new, stats, broken)
        errors += self._calls(calls, old, new, stats)
        return errors

    def _names(
        self,
        refs: Sequence[Ref],
        old: Symbols,
        new: Symbols,
        stats: Counter[str],
        broken: set[str],
    ) -> list[RowError]:
        errors: list[RowError] = []
        seen: set[tuple[bytes, int, str]] = set()
        for ref in refs:
            if (ref.path, ref.line, ref.dotted) in seen:
                continue
            seen.add((ref.path, ref.line, ref.dotted))
            stats["references"] += 1
            # The branch first: a name it resolves needs no look at the old side, so in a row
            # without errors the old side's version of the touched files is never parsed.
            now = resolve(new, ref)
            if isinstance(now, Found):
                stats["resolved"] += 1
                continue
            if isinstance(now, Unknown):
                stats[_skip_reason(now, "new")] += 1
                continue
            if not ref.dotted_path and not ref.self_depth and ref.attrs[0] in BUILTINS:
                stats["builtin"] += 1
                continue
            if _inside(now.container, broken) or _inside(f"{now.container}.{now.name}", broken):
                # A module that does not parse has no names at all; its compile error says why.
                stats["in a file that does not compile"] += 1
                continue
            was = resolve(old, ref)
            if not isinstance(was, Found):
                stats[_skip_reason(was, "old")] += 1
                continue
            if accepted(self.accept, ref.dotted) or accepted(
                self.accept, f"{now.container}.{now.name}"
            ):
                stats["accepted"] += 1
                continue
            stats["missing"] += 1
            hint = [_spelled(ref.text, now.name, n) for n in _near_names(new, now)]
            errors.append(
                RowError(
                    "names",
                    ref.path,
                    ref.line,
                    f"{ref.text}: {now.container} has no {now.name} on {self.new_label}",
                    f"{_where(was)} on {self.old_label}",
                    f"resolved as {ref.dotted}"
                    + (f"; {self.new_label} has {', '.join(hint)}" if hint else ""),
                )
            )
        return errors

    def _calls(
        self, calls: Sequence[CallRef], old: Symbols, new: Symbols, stats: Counter[str]
    ) -> list[RowError]:
        errors: list[RowError] = []
        for call in calls:
            stats["calls"] += 1
            ref = call.ref
            if ref is None or call.starred:
                stats["call skipped: not bindable statically"] += 1
                continue
            if not ref.dotted_path and not ref.self_depth and ref.attrs[0] in BUILTINS:
                stats["call skipped: builtin"] += 1
                continue
            now_found = resolve(new, ref)
            now = _definition(new, now_found)
            if isinstance(now, str):
                stats[f"call skipped: {now}"] += 1
                continue
            now_fn, now_bound, now_where = now
            problems = bind(now_fn, now_bound, call.positional, call.keywords)
            if not problems:
                stats["calls bound"] += 1
                continue
            was = _definition(old, resolve(old, ref))
            if isinstance(was, str):
                stats["call skipped: callee not on the old side"] += 1
                continue
            was_fn, was_bound, was_where = was
            if bind(was_fn, was_bound, call.positional, call.keywords):
                stats["call skipped: does not bind on the old side either"] += 1
                continue
            if accepted(self.accept, ref.dotted):
                stats["accepted"] += 1
                continue
            stats["calls unbound"] += 1
            errors.append(
                RowError(
                    "signatures",
                    call.path,
                    call.line,
                    f"{call.text}(...) does not bind on {self.new_label}: {'; '.join(problems)}",
                    f"{now_where} {now_fn.name}({ast.unparse(now_fn.args)})",
                    f"{self.old_label}: {was_where} {was_fn.name}({ast.unparse(was_fn.args)})",
                )
            )
        return errors


def verify_row(
    row: str,
    paths: Iterable[bytes],
    old_before: Reader,
    old_after: Reader,
    new_before: Reader,
    new_after: Reader,
    package: str = "vllm",
) -> RowVerdict:
    """One row's check on its own (a rebase keeps a :class:`RowVerifier` instead)."""
    return RowVerifier(package).verify(row, paths, old_before, old_after, new_before, new_after)


def _compile_error(path: bytes, error: tuple[int, str, str], added: Sequence[int]) -> RowError:
    line, message, text = error
    # The parser reports where it gave up; the row's nearest added line above it is the likely cause.
    near = max((a for a in added if a <= line), default=line)
    where = f"line {line}: {text}" if text else f"line {line}"
    return RowError("compiles", path, near, f"does not compile: {message}", where)


def _inside(dotted: str, modules: set[str]) -> bool:
    return any(dotted == m or dotted.startswith(m + ".") for m in modules)


def _where(found: Found) -> str:
    return f"{show(found.path)}:{found.line}" if found.line else show(found.path)


def _skip_reason(result: Missing | Unknown, side: str) -> str:
    if isinstance(result, Missing):
        return f"not on the {side} side"
    return "outside the package" if "outside" in result.reason else f"unknown on {side}"


def _definition(symbols: Symbols, found: Found | Missing | Unknown) -> tuple[Def, bool, str] | str:
    """The function a call binds against, whether its first parameter is bound, and where it is;
    else why the call is not checked."""
    got = callee(symbols, found)
    if isinstance(got, str):
        return got
    fn, bound = got
    assert isinstance(found, Found)
    path = found.path
    if found.kind == "class":
        assert isinstance(found.obj, ClassInfo)
        init = symbols.class_attr(found.obj, "__init__", via_instance=True)
        assert isinstance(init, Found)
        path = init.path
    return fn, bound, f"{show(path)}:{fn.lineno}"


def _near_names(symbols: Symbols, missing: Missing) -> list[str]:
    """Attributes of the class that lacks ``missing.name`` that look like its new name: a suffix
    (``selector_top_k`` -> ``top_k``), the name without its underscore, or the same name one
    attribute down (``_cached_ids`` -> ``sampler.cached_ids``)."""
    owner = symbols.lookup_dotted(missing.container.split("."))
    if not isinstance(owner, Found) or owner.kind != "class":
        return []
    assert isinstance(owner.obj, ClassInfo)
    names: dict[str, ClassInfo] = {}
    for cls in _mro(symbols, owner.obj):
        for name in (*cls.members, *cls.instance):
            names.setdefault(name, cls)
    wanted = missing.name.lstrip("_")
    out = [n for n in names if _alike(wanted, n.lstrip("_"))]
    for attr, cls in names.items():
        typed = cls.types.get(attr)
        if typed is None:
            continue
        held = symbols.expr(cls.module, typed)
        if isinstance(held, Found) and held.kind == "class":
            assert isinstance(held.obj, ClassInfo)
            inner = {*held.obj.members, *held.obj.instance}
            out += [f"{attr}.{n}" for n in sorted(inner) if n.lstrip("_") == wanted]
    return out[:3]


def _spelled(text: str, name: str, new: str) -> str:
    """``text`` (``self.selector_top_k``) with the component ``name`` replaced by ``new``."""
    parts = text.split(".")
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == name:
            return ".".join([*parts[:i], new, *parts[i + 1 :]])
    return new


def _alike(wanted: str, name: str) -> bool:
    if not name or not wanted:
        return False
    if name == wanted or wanted.endswith("_" + name) or name.endswith("_" + wanted):
        return True
    return difflib.SequenceMatcher(None, wanted, name).ratio() >= 0.8


def _mro(symbols: Symbols, cls: ClassInfo, depth: int = 0) -> list[ClassInfo]:
    out = [cls]
    if depth > 10:
        return out
    for base in cls.node.bases:
        node = base.value if isinstance(base, ast.Subscript) else base
        found = symbols.expr(cls.module, node)
        if isinstance(found, Found) and found.kind == "class":
            assert isinstance(found.obj, ClassInfo)
            out += _mro(symbols, found.obj, depth + 1)
    return out


@record
class WrittenRow:
    """What the checks of one written row found: its static errors and its stale copies."""

    row: str
    verdict: RowVerdict
    stale: list[StaleCopy]

    @property
    def ok(self) -> bool:
        return self.verdict.ok and not self.stale

    def lines(self) -> list[str]:
        """One line per finding, ``path:line: message``, for a person (the pause's message)."""
        out = [f"{show(e.path)}:{e.line}: {e.message}" for e in self.verdict.errors]
        out += [f"{show(s.path)}:{s.line}: {s.message}" for s in self.stale]
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            **self.verdict.to_json(),
            "stale_copies": [s.to_json() for s in self.stale],
        }


class RebaseChecks:
    """What a rebase keeps to check the rows it writes: one parse store, one index of the old
    release's functions (built only when a row adds a function), both for the whole rebase."""

    def __init__(
        self,
        package: str,
        old_release: Reader,
        old_paths: Callable[[], Iterable[bytes]],
        new_release: Reader,
        old_label: str = "the old release",
        new_label: str = "the new branch",
        accept: Iterable[str] = (),
        copy_store: IndexStore | None = None,
    ) -> None:
        prefix = package.encode() + b"/"
        self.verifier = RowVerifier(package, old_label, new_label, accept=accept)
        self.copies = CopyIndex(
            old_release, lambda: [p for p in old_paths() if p.startswith(prefix)], copy_store
        )
        self.new_release = new_release

    def check(
        self,
        row: str,
        paths: Iterable[bytes],
        old_before: Reader,
        old_after: Reader,
        new_before: Reader,
        new_after: Reader,
    ) -> WrittenRow:
        """Both checks of ``row`` as written (the four trees as :meth:`RowVerifier.verify` takes
        them); the stale copies are reported on the written file's lines."""
        paths = sorted(set(paths))
        verdict = self.verifier.verify(row, paths, old_before, old_after, new_before, new_after)
        added: dict[bytes, tuple[bytes, tuple[int, ...]]] = {}
        for path in paths:
            after = new_after(path)
            if after is not None and path.endswith(b".py"):
                added[path] = (after, changed_lines(new_before(path), after).added)
        stale = stale_copies(added, self.copies, self.new_release, self.verifier.store.tree)
        return WrittenRow(row, verdict, stale)

"""``check``: every invariant as an independent function returning findings, aggregated in one report.

A check is a function ``(ctx: CheckContext) -> list[Finding]``. The pipeline is :data:`PIPELINE`, a tuple
of ``"module:function"`` names imported only when run (so a check living in a heavy module costs
nothing to the others): **adding an invariant is adding one line there**. Checks share work through the
context's cached properties (the manifest, each row's parsed patch, the pristine tree, the result of
applying the series), never through each other.

Severities: ``error`` (an invariant is broken → exit 1), ``warning`` (shown, exit unchanged) and
``problem`` (the check could not run: a usage or environment problem such as an unreachable registry
→ exit 2). A check that raises a typed error (``HqpError``) becomes a ``problem`` finding, so one
broken input never hides the other checks' results.

Nothing here writes: not into the repository, not into any tree (the pristine tree is read from the
cache, the series is applied in memory).
"""

from __future__ import annotations

import importlib
import os
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from hyperqwen_patches.errors import ExitCode, HqpError
from hyperqwen_patches.manifest import MANIFEST_RELPATH, Manifest, load_manifest

if TYPE_CHECKING:
    from hyperqwen_patches.engine.applying import HunkResult, SeriesResult
    from hyperqwen_patches.pristine import PristineTree, Progress
    from hyperqwen_patches.series import SeriesRow

# "note" is information a reviewer should see (e.g. the knob registry count); it never fails a check.
Severity = Literal["error", "warning", "problem", "note"]

# The invariants, in the order they run and are reported. One line per check (DESIGN.md numbers them).
PIPELINE: tuple[str, ...] = (
    "hyperqwen_patches.check:check_pin",  # 1. one pin: manifest == docker/requirements.txt
    "hyperqwen_patches.check:check_series",  # 2. series file ⇔ files on disk ⇔ manifest rows
    "hyperqwen_patches.check:check_apply",  # 3. every hunk applies at fuzz 0 onto the pristine tree
    "hyperqwen_patches.check:check_render",  # 6. PATCHES.md and patches/series == what render writes
    "hyperqwen_patches.replay:check_replay_identity",  # 4. pristine + rows 1..k == k-th fork commit
    "hyperqwen_patches.replay:check_export",  # 5. every row's file == what export writes from the fork
    "hyperqwen_patches.replay:check_fork_commits",  # 7. manifest commits on their export points
    "hyperqwen_patches.exporting:check_unfilled_rows",  # rows export added, metadata still TODO
    "hyperqwen_patches.port:check_retirements",  # 8. a retirement reverse-applies on its pin
    "hyperqwen_patches.statics.compiles:check_compiles",  # touched .py files compile after the series
    "hyperqwen_patches.statics.knobs:check_knobs",  # knobs read through vllm.envs, registered, keyed
    "hyperqwen_patches.statics.names:check_names",  # names a row's cut_against had, gone at the pin
    "hyperqwen_patches.statics.signatures:check_signatures",  # calls whose callee changed by the pin
    "hyperqwen_patches.statics.whitespace:check_whitespace",  # added lines pass git diff --check
    "hyperqwen_patches.statics.gitapply:check_git_apply",  # git_apply rows pass git apply --check
)

# Checks whose time is mostly spent waiting on git processes (opening the fork bundle, export's git
# runs). run_check runs them, in this order, on one worker thread while the others run on the calling
# thread: the GIL is free while a child process runs, so the two overlap. They share nothing with the
# others but the context's locked properties (series, pristine), and the report keeps PIPELINE order.
BACKGROUND: frozenset[str] = frozenset(
    {
        "hyperqwen_patches.replay:check_replay_identity",
        "hyperqwen_patches.replay:check_export",
        "hyperqwen_patches.replay:check_fork_commits",
    }
)

REQUIREMENTS = "docker/requirements.txt"
# Directories whose patch files (and module files under files/) must all be rows (invariant 2).
CARRIED_DIRS = ("patches", "kvarn")
PATCH_SUFFIXES = (".patch", ".diff")


@dataclass(frozen=True)
class Finding:
    """One thing a check found: which check, how bad, about what, and the details."""

    check: str
    severity: Severity
    subject: str
    message: str
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        return {
            "check": self.check,
            "severity": self.severity,
            "subject": self.subject,
            "message": self.message,
            "detail": self.detail,
        }


T = TypeVar("T")


class _once(Generic[T]):
    """A cached property computed once even when two threads ask at the same time.

    functools.cached_property has no lock from Python 3.12 on; run_check reads the context from two
    threads. The value lands in the instance dict under the property's name, so ``peek`` sees it and
    later reads never take the lock.
    """

    def __init__(self, func: Callable[[Any], T]) -> None:
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> T:
        if obj is None:
            return self  # type: ignore[return-value]
        cache = obj.__dict__
        if self.name in cache:
            return cache[self.name]  # type: ignore[no-any-return]
        with obj._lock:  # one re-entrant lock per context: `applied` needs `series` and `pristine`
            if self.name not in cache:
                cache[self.name] = self.func(obj)
            return cache[self.name]  # type: ignore[no-any-return]


@dataclass
class CheckContext:
    """What the checks share; every expensive part is computed once, on first use."""

    root: Path
    manifest: Manifest
    source: str
    max_offset: int | None = None
    progress: Progress | None = None
    fork: str | None = None  # --fork PATH|URL|BUNDLE (default: patches/fork.bundle when present)
    export_point: str | None = None  # --export-point NAME (default: every export point)
    _opened: list[PristineTree] = field(default_factory=list)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)

    @_once
    def series(self) -> list[SeriesRow]:
        """Every row (skipped ones included) with its engine patch or the error building it."""
        from hyperqwen_patches.series import load_series

        return load_series(self.manifest, include_skipped=True)

    @_once
    def pristine(self) -> PristineTree:
        from hyperqwen_patches.pristine import open_pristine

        tree = open_pristine(
            self.source,
            package=self.manifest.package,
            version=self.manifest.pin,
            progress=self.progress,
        )
        self._opened.append(tree)
        return tree

    @_once
    def applied(self) -> SeriesResult:
        """The applied rows, in order, onto the pristine tree, in memory (engine policies on)."""
        from hyperqwen_patches.engine.applying import Policy, apply_series

        patches = [s.patch for s in self.series if s.patch is not None and s.row.skip is None]
        policy = Policy(max_offset=self.max_offset, exact=False, ambiguity="error", forward=True)
        return apply_series(patches, self.pristine.read, policy)

    def peek(self, name: str) -> Any:
        """A cached property's value if a check computed it, else None; never computes it."""
        return self.__dict__.get(name)

    def close(self) -> None:
        for tree in self._opened:
            tree.close()


CheckFunction = Callable[[CheckContext], list[Finding]]


def resolve(target: str) -> CheckFunction:
    module, _, name = target.partition(":")
    fn: CheckFunction = getattr(importlib.import_module(module), name)
    return fn


def check_name(target: str) -> str:
    """The short name a pipeline entry reports under: ``check_pin`` → ``pin``."""
    return target.partition(":")[2].removeprefix("check_").replace("_", "-")


# --- the report -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HunkRecord:
    path: str
    number: int
    stated_line: int
    applied_line: int | None
    offset: int
    status: str
    other_matches: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "hunk": self.number,
            "stated_line": self.stated_line,
            "applied_line": self.applied_line,
            "offset": self.offset,
            "status": self.status,
            "other_matches": list(self.other_matches),
        }


@dataclass(frozen=True)
class RowRecord:
    """One line of the table: a row and how it applied."""

    row: str
    kind: str
    source: str
    files: int
    hunks: int
    exact: int
    offset: int
    status: str  # exact | offset | failed | ambiguous | already-applied | skipped | error | not-run
    note: str = ""
    hunk_records: tuple[HunkRecord, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "row": self.row,
            "kind": self.kind,
            "source": self.source,
            "files": self.files,
            "hunks": self.hunks,
            "exact": self.exact,
            "at_offset": self.offset,
            "status": self.status,
            "note": self.note,
            "hunk_results": [h.to_json() for h in self.hunk_records],
        }


@dataclass(frozen=True)
class CheckReport:
    repo: Path
    pin: str
    source: str
    checks: tuple[str, ...]
    rows: tuple[RowRecord, ...]
    findings: tuple[Finding, ...]

    @property
    def exit_code(self) -> ExitCode:
        if any(f.severity == "problem" for f in self.findings):
            return ExitCode.USAGE
        if any(f.severity == "error" for f in self.findings):
            return ExitCode.FINDING
        return ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        return {
            "repo": str(self.repo),
            "pin": self.pin,
            "source": self.source,
            "checks": list(self.checks),
            "ok": self.exit_code == ExitCode.OK,
            "exit_code": int(self.exit_code),
            "rows": [r.to_json() for r in self.rows],
            "findings": [f.to_json() for f in self.findings],
        }


def run_check(
    root: Path,
    *,
    source: str | None = None,
    max_offset: int | None = None,
    progress: Progress | None = None,
    fork: str | None = None,
    export_point: str | None = None,
    pipeline: tuple[str, ...] = PIPELINE,
) -> CheckReport:
    """Run every check of the pipeline; an invalid manifest raises ``ManifestError`` (exit 2) first."""
    # git runs in scratch directories, where a relative root would name nothing.
    root = root.resolve()
    manifest = load_manifest(root)
    if source is not None:
        from hyperqwen_patches.pristine import parse_source

        parse_source(source)  # a malformed --source is a usage error before anything runs
    ctx = CheckContext(
        root=root,
        manifest=manifest,
        source=source or manifest.source,
        max_offset=max_offset,
        progress=progress,
        fork=fork,
        export_point=export_point,
    )

    def run_one(target: str) -> list[Finding]:
        name = check_name(target)
        try:
            return resolve(target)(ctx)
        except HqpError as exc:
            detail = f"hint: {exc.hint}" if exc.hint else ""
            return [Finding(name, "problem", name, exc.message, detail)]

    def run_background(indexes: list[int]) -> dict[int, list[Finding]]:
        return {i: run_one(pipeline[i]) for i in indexes}

    results: dict[int, list[Finding]] = {}
    try:
        background = [i for i, t in enumerate(pipeline) if t in BACKGROUND]
        # Leaving the with block waits for the worker (also when a check raises), so nothing still
        # runs when the context is closed below.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="hqp-check") as pool:
            pending = pool.submit(run_background, background) if background else None
            for i, target in enumerate(pipeline):
                if target not in BACKGROUND:
                    results[i] = run_one(target)
            if pending is not None:
                results.update(pending.result())  # re-raises what the worker raised
        rows = row_records(ctx)
    finally:
        ctx.close()
    findings = [f for i in range(len(pipeline)) for f in results[i]]
    return CheckReport(
        repo=root,
        pin=manifest.pin,
        source=ctx.source,
        checks=tuple(check_name(t) for t in pipeline),
        rows=tuple(rows),
        findings=tuple(findings),
    )


def _hunk_records(result: Any) -> tuple[HunkRecord, ...]:
    out: list[HunkRecord] = []
    for file in result.files:
        for h in file.hunks:
            out.append(
                HunkRecord(
                    path=file.path.decode("utf-8", errors="backslashreplace"),
                    number=h.number,
                    stated_line=h.stated_line,
                    applied_line=h.applied_line,
                    offset=h.offset,
                    status=h.status,
                    other_matches=tuple(h.other_matches),
                )
            )
    return tuple(out)


def row_records(ctx: CheckContext) -> list[RowRecord]:
    """The table: one record per row, from the apply result when the apply check ran."""
    from hyperqwen_patches.series import SeriesRow

    applied = ctx.peek("applied")  # never applied just for the table
    results = {p.name: p for p in applied.patches} if applied is not None else {}
    out: list[RowRecord] = []
    series = ctx.peek("series") or [SeriesRow(row, None, None) for row in ctx.manifest.rows]
    for s in series:
        row = s.row
        base = {"row": row.name, "kind": row.kind, "source": row.source_path}
        patch = s.patch
        n_files = len(patch.files) if patch is not None else 0
        n_hunks = sum(len(f.hunks) for f in patch.files) if patch is not None else 0
        if row.skip is not None:
            out.append(
                RowRecord(
                    **base,
                    files=n_files,
                    hunks=n_hunks,
                    exact=0,
                    offset=0,
                    status="skipped",
                    note=row.skip,
                )
            )
            continue
        if s.error is not None:
            out.append(
                RowRecord(**base, files=0, hunks=0, exact=0, offset=0, status="error", note=s.error)
            )
            continue
        result = results.get(row.name)
        if result is None:
            out.append(
                RowRecord(**base, files=n_files, hunks=n_hunks, exact=0, offset=0, status="not-run")
            )
            continue
        hunks = _hunk_records(result)
        exact = sum(1 for h in hunks if h.status == "exact")
        at_offset = sum(1 for h in hunks if h.status == "offset")
        if result.status == "failed":
            status = "ambiguous" if any(h.status == "ambiguous" for h in hunks) else "failed"
        elif result.status == "already-applied":
            status = "already-applied"
        else:
            status = "offset" if at_offset else "exact"
        out.append(
            RowRecord(
                **base,
                files=n_files,
                hunks=n_hunks,
                exact=exact,
                offset=at_offset,
                status=status,
                note=result.error or "",
                hunk_records=hunks,
            )
        )
    return out


# --- invariant 1: one pin -----------------------------------------------------------------------------

_REQ_LINE = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(?P<spec>[<>=!~].*)?$"
)


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def check_pin(ctx: CheckContext) -> list[Finding]:
    """Invariant 1: the manifest pin equals ``docker/requirements.txt``'s ``vllm==``."""
    m = ctx.manifest
    subject = REQUIREMENTS
    try:
        text = (ctx.root / REQUIREMENTS).read_text(encoding="utf-8")
    except FileNotFoundError:
        return [
            Finding(
                "pin",
                "error",
                subject,
                f"{REQUIREMENTS} does not exist; it must pin {m.package}=={m.pin}",
            )
        ]
    pins: list[tuple[int, str]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        match = _REQ_LINE.match(line)
        if match is None or _normalize(match["name"]) != _normalize(m.package):
            continue
        pins.append((number, (match["spec"] or "").replace(" ", "")))
    if not pins:
        return [
            Finding(
                "pin",
                "error",
                subject,
                f"{REQUIREMENTS} does not name {m.package}; it must pin {m.package}=={m.pin}",
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
                    f"{REQUIREMENTS}:{number}",
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


def _carried_files(root: Path) -> list[str]:
    """Repo-relative paths of every patch file and module file under the carried directories."""
    out: list[str] = []
    for top in CARRIED_DIRS:
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
    from hyperqwen_patches.render import SERIES, series_entry

    m = ctx.manifest
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
    for rel in _carried_files(ctx.root):
        if rel in named_patches:
            continue
        if any(rel.startswith(f"{d}/") for d in module_dirs if d is not None):
            continue
        what = "patch file" if rel.endswith(PATCH_SUFFIXES) else "module file"
        add(rel, f"{what} that no row of {MANIFEST_RELPATH} names")
    # Series file ⇔ rows, in order.
    try:
        text = (ctx.root / SERIES).read_text(encoding="utf-8")
    except FileNotFoundError:
        add(SERIES, f"{SERIES} does not exist (run: hyperqwen-patches render)")
        return findings
    entries = _series_entries(text)
    expected = [series_entry(r) for r in m.active_rows if not r.is_module]
    by_entry = {series_entry(r): r for r in m.rows}
    listed = {e for _, e in entries}
    seen: set[str] = set()
    for number, entry in entries:
        row = by_entry.get(entry)
        if entry in seen:
            add(f"{SERIES}:{number}", f"{entry} is listed more than once")
        elif row is None:
            add(f"{SERIES}:{number}", f"{entry} is not a row of {MANIFEST_RELPATH}")
        elif row.skip is not None:
            add(f"{SERIES}:{number}", f"{entry} is row {row.name}, which is skipped ({row.skip})")
        elif row.is_module:
            add(
                f"{SERIES}:{number}",
                f"{entry} is module row {row.name}: a directory cannot be applied as a patch",
            )
        seen.add(entry)
    for entry in expected:
        if entry not in listed:
            row = by_entry[entry]
            add(SERIES, f"row {row.name} ({entry}) is missing from {SERIES}")
    actual_order = [e for _, e in entries if e in set(expected)]
    wanted_order = [e for e in expected if e in listed]
    if actual_order != wanted_order:
        add(
            SERIES,
            f"the order differs from the manifest's: {', '.join(actual_order)} (manifest: {', '.join(wanted_order)})",
        )
    return findings


# --- invariant 3: applies at fuzz 0 ---------------------------------------------------------------------


def _hunk_message(h: HunkResult, max_offset: int | None) -> str:
    if h.status == "ambiguous":
        where = ", ".join(str(x) for x in h.other_matches)
        return f"ambiguous: its context matches at line {h.applied_line or h.reported_line} and also at {where}"
    if h.status == "failed":
        reason = f": {h.reason}" if h.reason else ""
        return f"does not apply at fuzz 0 (stated line {h.stated_line}; GNU patch: FAILED at {h.reported_line}){reason}"
    return f"at offset {h.offset} lines, more than --max-offset {max_offset}"


def _near_miss_text(nm: Any) -> str:
    from hyperqwen_patches.console import show

    lines = [f"closest place: line {nm.line}, {nm.matched} of {nm.total} context lines equal"]
    for d in nm.differences:
        actual = "(end of file)" if d.actual is None else repr(show(d.actual))
        lines.append(f"  line {d.line}: expected {show(d.expected)!r}")
        lines.append(f"  {' ' * len(str(d.line))}       found    {actual}")
    return "\n".join(lines)


def check_apply(ctx: CheckContext) -> list[Finding]:
    """Invariant 3: every row applies, in order, at fuzz 0 onto the pristine tree; ambiguity fails."""
    findings: list[Finding] = []
    # Opened even for an empty series: it proves the pin's pristine tree can be obtained.
    _ = ctx.pristine
    for s in ctx.series:
        if s.row.skip is None and s.error is not None:
            findings.append(Finding("apply", "error", f"row {s.row.name}", s.error))
    result = ctx.applied
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
            path = file.path.decode("utf-8", errors="backslashreplace")
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
                findings.append(
                    Finding(
                        "apply",
                        "error",
                        f"{subject_row}: {path} hunk #{h.number}",
                        _hunk_message(h, ctx.max_offset),
                        detail,
                    )
                )
    return findings


# --- invariant 6: rendered files are current --------------------------------------------------------


def check_render(ctx: CheckContext) -> list[Finding]:
    """Invariant 6: PATCHES.md and patches/series are exactly what ``render`` writes."""
    from hyperqwen_patches.render import drift

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

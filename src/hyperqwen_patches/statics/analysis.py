"""What the static checks share: the series traced through the pristine tree, and parsed modules.

``check`` runs the static checks as independent pipeline functions; they share one :class:`Analysis`
per ``CheckContext`` (kept in the context's ``__dict__``, where its cached properties live too), so
the series is traced once and each touched file is parsed at most once, whichever checks run.
"""

from __future__ import annotations

import ast
import gc
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from hyperqwen_patches.checks.context import Slot
from hyperqwen_patches.console import show
from hyperqwen_patches.records import record

if TYPE_CHECKING:
    from hyperqwen_patches.checks.context import CheckContext, Finding, Severity
    from hyperqwen_patches.statics.provenance import Provenance


@record(frozen=True)
class StaticFinding:
    """One finding of a static check, located: the row, the patched file and its line."""

    check: str
    severity: Severity
    row: str | None  # None: no row introduced it (a pristine line, or the series as a whole)
    path: bytes | None
    line: int | None
    message: str
    detail: str = ""

    @property
    def subject(self) -> str:
        where = ""
        if self.path is not None:
            where = show(self.path) + (f":{self.line}" if self.line else "")
        if self.row is None:
            return where or "series"
        return f"row {self.row}: {where}" if where else f"row {self.row}"

    def to_finding(self) -> Finding:
        from hyperqwen_patches.checks.context import Finding

        return Finding(self.check, self.severity, self.subject, self.message, self.detail)

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "severity": self.severity,
            "row": self.row,
            "path": None if self.path is None else show(self.path),
            "line": self.line,
            "message": self.message,
            "detail": self.detail,
        }


@contextmanager
def no_gc() -> Iterator[None]:
    """Parsing builds many small objects and none are garbage; collecting during it costs ~40%."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextmanager
def quiet() -> Iterator[None]:
    """No warnings while parsing a release's files (an invalid escape in a string warns; from 3.12
    on as a SyntaxWarning, shown by default): nothing below the CLI prints, and a warning about a
    file parsed for its names is nobody's finding."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


class Analysis:
    """The traced series on one tree, plus a memo of parsed modules (path -> AST or None)."""

    def __init__(
        self, prov: Provenance, read: Callable[[bytes], bytes | None] | None = None
    ) -> None:
        self.prov = prov
        self.read = read  # the tree under the series (files the series does not touch)
        self._trees: dict[bytes, ast.Module | None] = {}

    def tree(self, path: bytes) -> ast.Module | None:
        """The patched file parsed (None when it does not parse: ``compiles`` reports that)."""
        if path not in self._trees:
            data = self.prov.content.get(path)
            parsed: ast.Module | None = None
            if data is not None:
                try:
                    with no_gc():
                        parsed = ast.parse(data, filename=show(path))
                except (SyntaxError, ValueError):
                    parsed = None
            self._trees[path] = parsed
        return self._trees[path]


def _build_analysis(ctx: CheckContext) -> Analysis:
    from hyperqwen_patches.statics.provenance import trace

    patches = [s.patch for s in ctx.series if s.patch is not None and s.row.skip is None]
    return Analysis(trace(patches, ctx.applied, ctx.pristine.read), ctx.pristine.read)


# The static checks' one analysis per check run (checks/context.py's slots).
ANALYSIS: Slot[Analysis] = Slot("static analysis", _build_analysis)


def analysis_of(ctx: CheckContext) -> Analysis:
    """The context's analysis, built on first use from the apply check's result (never re-applied)."""
    return ctx.shared(ANALYSIS)


def python_files(prov: Provenance) -> list[bytes]:
    return [p for p in prov.files() if p.endswith(b".py")]

"""Compiles: every Python file the series touches or adds byte-compiles after the series.

``compile()`` on the patched bytes in memory (nothing is written, no ``__pycache__``): the parser and
the symbol table pass, so ``return`` outside a function or a bad ``nonlocal`` is caught as well as a
syntax error. The error names the row that introduced the line; a syntax error reported on a
pristine line (an unclosed bracket a row opened shows up lines later) names the row of the nearest
added line above it. ``SyntaxWarning`` on an added line (an invalid escape sequence, ``is`` with a
literal) is a warning: a later Python makes some of them errors.

The interpreter is the tool's own; a file whose pristine version does not compile either (a newer
syntax than this Python reads, a test fixture) is not the series' doing and is not reported.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hyperqwen_patches import resultcache
from hyperqwen_patches.console import show
from hyperqwen_patches.statics.analysis import StaticFinding, analysis_of, python_files

if TYPE_CHECKING:
    from hyperqwen_patches.checks.context import CheckContext, Finding
    from hyperqwen_patches.statics.provenance import Provenance

CHECK = "compiles"


def _blame(prov: Provenance, path: bytes, line: int) -> tuple[str | None, int | None]:
    """The row of ``line``, else of the nearest added line above it (and that line)."""
    row = prov.owner(path, line)
    if row is not None:
        return row, line
    for number in range(min(line, len(prov.owners.get(path, ()))), 0, -1):
        row = prov.owner(path, number)
        if row is not None:
            return row, number
    return None, None


# Bump when what _compile_result computes changes (its cached entries are then never read again).
RESULT_VERSION = "1"


def _compile_result(data: bytes, path: bytes) -> dict[str, Any]:
    """What ``compile()`` says of ``data``: the error (if any) and the SyntaxWarnings, as JSON.

    Pure in (interpreter, path, bytes), so it goes through the result cache: compiling the touched
    files is most of this check's time and they rarely change between two runs.
    """

    def compute() -> dict[str, Any]:
        error: dict[str, Any] | None = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SyntaxWarning)
            try:
                compile(data, show(path), "exec", dont_inherit=True)
            except SyntaxError as exc:
                error = {"kind": "syntax", "msg": exc.msg, "lineno": exc.lineno, "text": exc.text}
            except ValueError as exc:  # NUL bytes in the source
                error = {"kind": "value", "msg": str(exc), "lineno": None, "text": None}
        found = [
            [w.lineno, str(w.message)] for w in caught if issubclass(w.category, SyntaxWarning)
        ]
        return {"error": error, "warnings": [] if error else found}

    value = resultcache.cached(CHECK, RESULT_VERSION, (sys.version, path, data), compute)
    return value  # type: ignore[no-any-return]


def _compiles(data: bytes | None, path: bytes) -> bool:
    return data is not None and _compile_result(data, path)["error"] is None


def compile_findings(
    prov: Provenance, read: Callable[[bytes], bytes | None] | None = None
) -> list[StaticFinding]:
    """``read`` gives the pristine file: one that did not compile before the series either is not
    the series' doing (a fixture, a newer syntax than this Python) and is left alone."""
    found: list[StaticFinding] = []
    version = f"Python {sys.version_info.major}.{sys.version_info.minor}"
    for path in python_files(prov):
        data = prov.content[path]
        assert data is not None
        result = _compile_result(data, path)
        error = result["error"]
        if error is not None and error["kind"] == "syntax":
            line = error["lineno"] or 1
            if read is not None and path not in prov.created and not _compiles(read(path), path):
                continue
            row, at = _blame(prov, path, line)
            text = (error["text"] or "").rstrip("\n")
            detail = f"line {line}: {text}" if text else ""
            if row is None:
                # The pristine file compiles, so a row broke it below the reported line.
                first = next(iter(prov.added_lines(path)), None)
                if first is not None:
                    at, row = first
            where = ""
            if at is not None and at != line:
                where = f" (reported at line {line}; the row's nearest added line: {at})"
            found.append(
                StaticFinding(
                    CHECK,
                    "error",
                    row,
                    path,
                    at,
                    f"does not compile ({version}): {error['msg']}{where}",
                    detail,
                )
            )
            continue
        if error is not None:
            found.append(
                StaticFinding(CHECK, "error", _blame(prov, path, 1)[0], path, None, error["msg"])
            )
            continue
        for lineno, message in result["warnings"]:
            row = prov.owner(path, lineno)
            if row is not None:
                found.append(
                    StaticFinding(CHECK, "warning", row, path, lineno, f"SyntaxWarning: {message}")
                )
    return found


def check_compiles(ctx: CheckContext) -> list[Finding]:
    """Every touched or added Python file compiles after the series; errors name the row."""
    analysis = analysis_of(ctx)
    return [f.to_finding() for f in compile_findings(analysis.prov, analysis.read)]

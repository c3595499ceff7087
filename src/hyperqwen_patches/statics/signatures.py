"""Changed signatures: calls on added lines whose callee's parameters changed between two releases.

A call's callee is resolved like a name (``names.resolve``: imports, ``self``/``cls``, base
classes); a class call resolves to its ``__init__`` (found through the bases; a class without an
explicit one, a dataclass for instance, is skipped). The call is bound, as Python would, against
the old definition (it must bind there; otherwise it is not a change between the releases) and the
new one. Findings: a required argument the call does not pass, a keyword the new definition no
longer accepts, more positional arguments than it takes. A method reached through an instance
(``self.f(...)``) or a classmethod drops its first parameter; a staticmethod does not.

Every call on the added lines is counted: resolved (both definitions found) or skipped with its
reason (a local callee, ``*args``/``**kwargs`` in the call, a callee outside the package, the
series' own function, a callee the target removed, reported by ``names``), so silence is never read
as safety.
"""

from __future__ import annotations

import ast
from collections import Counter
from typing import TYPE_CHECKING

from hyperqwen_patches.display import show
from hyperqwen_patches.records import field, record
from hyperqwen_patches.statics.analysis import StaticFinding
from hyperqwen_patches.statics.names import BUILTINS, Views, accepted, resolve
from hyperqwen_patches.statics.refs import CallRef, Ref
from hyperqwen_patches.statics.symbols import ClassInfo, Found, Result, Symbols, Unknown

if TYPE_CHECKING:
    from hyperqwen_patches.checks.context import CheckContext, Finding

CHECK = "signatures"
Def = ast.FunctionDef | ast.AsyncFunctionDef


def _has(fn: Def, name: str) -> bool:
    return any(
        (isinstance(d, ast.Name) and d.id == name)
        or (isinstance(d, ast.Attribute) and d.attr == name)
        for d in fn.decorator_list
    )


def callee(symbols: Symbols, found: Result) -> tuple[Def, bool] | str:
    """The definition a call reaches and whether its first parameter is bound; else why not."""
    if isinstance(found, Unknown):
        return (
            "callee outside the package"
            if "outside" in found.reason
            else "not resolvable statically"
        )
    if not isinstance(found, Found):
        return "callee missing"
    if found.kind == "class":
        assert isinstance(found.obj, ClassInfo)
        init = symbols.class_attr(found.obj, "__init__", via_instance=True)
        if not isinstance(init, Found) or init.kind != "function":
            return "class without an explicit __init__"
        assert isinstance(init.obj, ast.FunctionDef | ast.AsyncFunctionDef)
        return init.obj, True
    if found.kind != "function":
        return f"callee is a {found.kind}"
    fn = found.obj
    assert isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
    if _has(fn, "staticmethod"):
        return fn, False
    if _has(fn, "classmethod"):
        return fn, found.owner is not None
    return fn, found.via_instance


def bind(fn: Def, bound: bool, positional: int, keywords: tuple[str, ...]) -> list[str]:
    """Why the call does not bind to ``fn`` (empty: it binds)."""
    a = fn.args
    params = [*a.posonlyargs, *a.args]
    n_defaults = len(a.defaults)
    has_default = {p.arg for p in params[len(params) - n_defaults :]} if n_defaults else set()
    posonly = {p.arg for p in a.posonlyargs}
    if bound and params:
        params = params[1:]
    names = [p.arg for p in params]
    problems: list[str] = []
    if positional > len(names) and a.vararg is None:
        problems.append(f"{positional} positional arguments, it takes {len(names)}")
    given = set(names[:positional])
    kwonly = {p.arg: d is not None for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)}
    for k in keywords:
        if (k in names and k not in posonly) or k in kwonly:
            given.add(k)
        elif a.kwarg is None:
            problems.append(f"no parameter named {k}")
    missing = [n for n in names if n not in given and n not in has_default]
    missing += [k for k, has in kwonly.items() if not has and k not in given]
    if missing:
        problems.append("missing required " + ", ".join(missing))
    return problems


def _sig(fn: Def) -> str:
    return f"({ast.unparse(fn.args)})"


@record
class SignatureReport:
    findings: list[StaticFinding]
    stats: Counter[str] = field(default_factory=Counter)

    def summary(self) -> str:
        s = self.stats
        skipped = {k.removeprefix("skip: "): v for k, v in s.items() if k.startswith("skip: ")}
        parts = ", ".join(f"{v} {k}" for k, v in sorted(skipped.items(), key=lambda kv: -kv[1]))
        return (
            f"{s['calls']} calls on added lines: {s['resolved']} resolved, {s['changed']} changed; "
            f"{sum(skipped.values())} skipped" + (f" ({parts})" if parts else "")
        )


def changed_signatures(views: Views, accept: tuple[str, ...] = ()) -> SignatureReport:
    _, calls = views.references()
    report = SignatureReport([])
    stats = report.stats

    def skip(reason: str) -> None:
        stats[f"skip: {reason}"] += 1

    for call in calls:
        stats["calls"] += 1
        if call.ref is None:
            skip(call.skip_reason or "callee not resolved")
            continue
        if call.starred:
            skip("*args/**kwargs in the call")
            continue
        ref = call.ref
        if not ref.dotted_path and not ref.self_depth and ref.attrs[0] in BUILTINS:
            skip("builtin")
            continue
        old_found = resolve(views.old, call.ref)
        if isinstance(old_found, Found) and not views.pristine_site(old_found):
            skip("the series' own callee")
            continue
        old = callee(views.old, old_found)
        if isinstance(old, str):
            skip(old if old != "callee missing" else "callee not in the old pin")
            continue
        new_found = resolve(views.new, call.ref)
        new = callee(views.new, new_found)
        if isinstance(new, str):
            skip("callee removed (see names)" if new == "callee missing" else new)
            continue
        old_fn, old_bound = old
        new_fn, new_bound = new
        if bind(old_fn, old_bound, call.positional, call.keywords):
            skip("does not bind on the old pin either")
            continue
        stats["resolved"] += 1
        problems = bind(new_fn, new_bound, call.positional, call.keywords)
        if not problems:
            continue
        if _unchanged_upstream(views, call.ref):
            # The call binds against the definition as the series leaves the old pin, and both
            # releases define the callee alike: what it lacks on the target is the series' own
            # widening, in a row that does not carry there (port's triage shows that row), not a
            # change upstream made (issue 38: "build(...) no longer binds" though build never changed).
            skip("signature unchanged upstream (the series' own definition)")
            continue
        if accepted(accept, call.ref.dotted):
            stats["accepted"] += 1
            continue
        stats["changed"] += 1
        old_at = _where(views, ref, old_found, old_fn, old_side=True)
        new_at = _where(views, ref, new_found, new_fn, old_side=False)
        report.findings.append(
            _finding(call, problems, old_fn, new_fn, old_at, new_at, views.new_label)
        )
    return report


def _unchanged_upstream(views: Views, ref: Ref) -> bool:
    """Both releases, without the series, give the callee the same parameters."""
    if views.old_pristine is None or views.new_pristine is None:
        return False
    before = callee(views.old_pristine, resolve(views.old_pristine, ref))
    after = callee(views.new_pristine, resolve(views.new_pristine, ref))
    if isinstance(before, str) or isinstance(after, str):
        return False
    return _sig(before[0]) == _sig(after[0]) and before[1] == after[1]


def _where(views: Views, ref: Ref, found: Result, fn: Def, *, old_side: bool) -> str:
    """Which definition a call was bound against: release, file:line, and the row that shaped it.

    On the old side provenance names the row that wrote a line of the signature; on the target side
    a definition whose parameters differ from the release's own is the series' (a row that carries
    there)."""
    symbols = views.old if old_side else views.new
    if isinstance(found, Found) and found.kind == "class":
        # The class's __init__ may be a base class's, in another module: name where it is.
        assert isinstance(found.obj, ClassInfo)
        found = symbols.class_attr(found.obj, "__init__", via_instance=True)
    path = found.path if isinstance(found, Found) else b""
    label = views.old_label if old_side else views.new_label
    where = f"{label} {show(path)}:{fn.lineno}"
    last = fn.body[0].lineno - 1 if fn.body else fn.lineno
    if old_side:
        row = views.analysis.prov.owner_of_span(path, fn.lineno, last)
        return (
            f"{where} as row {row} leaves it" if row is not None else f"{where} (the release's own)"
        )
    if views.new_pristine is None:
        return where
    own = callee(views.new_pristine, resolve(views.new_pristine, ref))
    if isinstance(own, str) or _sig(own[0]) != _sig(fn):
        return f"{where} as the series leaves it"
    return f"{where} (the release's own)"


def _finding(
    call: CallRef,
    problems: list[str],
    old: Def,
    new: Def,
    old_at: str,
    new_at: str,
    new_label: str,
) -> StaticFinding:
    return StaticFinding(
        CHECK,
        "error",
        call.row,
        call.path,
        call.line,
        f"{call.text}(...) no longer binds on {new_label}: {'; '.join(problems)}",
        f"{old_at}: {old.name}{_sig(old)}\n{new_at}: {new.name}{_sig(new)}",
    )


def check_signatures(ctx: CheckContext) -> list[Finding]:
    """Rows cut against an older release: calls whose callee changed parameters by the pin."""
    from hyperqwen_patches.statics.analysis import analysis_of
    from hyperqwen_patches.statics.names import _cut_views, _older_rows

    older = _older_rows(ctx.manifest)
    if not older:
        return []
    analysis = analysis_of(ctx)
    findings: list[Finding] = []
    accept = tuple(a.name for a in ctx.manifest.accepted_names)
    for version, rows in older.items():
        views, close = _cut_views(ctx, analysis, version)
        try:
            report = changed_signatures(views, accept)
        finally:
            close()
        findings += [f.to_finding() for f in report.findings if f.row in rows]
    return findings

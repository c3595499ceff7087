"""Knob hygiene: environment knobs the rows read go through ``vllm.envs`` and are registered there.

A knob is an environment variable whose name starts with ``VLLM_``, ``KVARN_`` or a prefix the
manifest declares (``knob_prefixes``). On the lines the rows add (outside ``vllm/envs.py``, whose
registry entries are where knobs are read by design):

- a **bare read** (``os.environ[...]``, ``os.environ.get(...)``, ``os.getenv(...)``, ``"X" in
  os.environ``, through any alias of ``os``/``environ``/``getenv``) of a knob is an error: it sits
  outside the torch.compile cache key (``vllm.envs.compile_factors`` hashes the registry, not the
  environment), so two settings can share a compile cache;
- ``os.environ`` passed on as a value (``env = os.environ``) in a function that names knobs is a
  warning: the knobs are read through a variable, which static analysis cannot follow further;
- a knob read through ``vllm.envs`` (``envs.X``, ``vllm.envs.X``, ``from vllm.envs import X``) must
  be registered: vllm.envs raises AttributeError for a name its registry lacks.

In ``vllm/envs.py`` after the series, every knob a row registers needs both halves (an annotation in
the ``if TYPE_CHECKING:`` block and an ``environment_variables`` entry) and must not be on the ignore
list of ``compile_factors()``, which is found by parsing (the literal set/list in that function
that a membership test reads), never hard-coded. The registry's entry count before and after the
series is part of the result (vLLM 0.29.0 has 302 entries).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from hyperqwen_patches import resultcache
from hyperqwen_patches.console import show
from hyperqwen_patches.records import field, record
from hyperqwen_patches.statics.analysis import Analysis, StaticFinding, analysis_of, no_gc

if TYPE_CHECKING:
    from hyperqwen_patches.checks.context import CheckContext, Finding
    from hyperqwen_patches.statics.provenance import Provenance

CHECK = "knobs"
DEFAULT_PREFIXES = ("VLLM_", "KVARN_")
ENVS = b"vllm/envs.py"
REGISTRY = "environment_variables"
# Added lines that mention none of these cannot read a knob: their files are not parsed.
_HINTS = (b"environ", b"getenv", b"envs")


@record(frozen=True)
class Registry:
    """``vllm/envs.py`` as parsed: annotated names, registry entries and the compile-factor ignores."""

    annotations: dict[str, int]  # name -> line (in the TYPE_CHECKING block)
    entries: dict[str, int]  # name -> line (a key of environment_variables)
    ignored: dict[str, int]  # name -> line (compile_factors' ignore list)
    ignore_found: bool = True


def parse_registry(tree: ast.Module) -> Registry:
    annotations: dict[str, int] = {}
    entries: dict[str, int] = {}
    ignored: dict[str, int] = {}
    found = False
    for node in tree.body:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for sub in node.body:
                if isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Name):
                    annotations[sub.target.id] = sub.lineno
        target, value = _assignment(node)
        if target == REGISTRY and isinstance(value, ast.Dict):
            for key in value.keys:
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    entries[key.value] = key.lineno
        # environment_variables["X"] = ... later in the module registers too.
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if (
                    isinstance(t, ast.Subscript)
                    and isinstance(t.value, ast.Name)
                    and t.value.id == REGISTRY
                    and isinstance(t.slice, ast.Constant)
                    and isinstance(t.slice.value, str)
                ):
                    entries[t.slice.value] = t.lineno
        if isinstance(node, ast.FunctionDef) and node.name == "compile_factors":
            found, ignored = _ignore_list(node)
    return Registry(annotations, entries, ignored, found)


# Bump when what parse_registry computes changes (its cached entries are then never read again).
RESULT_VERSION = "2"  # 2: entries written before this kept sorted keys, not line order


def registry_of(data: bytes) -> Registry | None:
    """``vllm/envs.py``'s registry (None when it does not parse), through the result cache.

    Parsing the 300-entry module is most of this check's time on a warm run; the registry is pure in
    (interpreter, bytes), so a series that leaves envs.py as it was reuses the last parse.
    """

    def compute() -> dict[str, Any]:
        try:
            with no_gc():
                tree = ast.parse(data, filename=show(ENVS))
        except (SyntaxError, ValueError):
            return {"parsed": False}
        r = parse_registry(tree)
        return {
            "parsed": True,
            "annotations": r.annotations,
            "entries": r.entries,
            "ignored": r.ignored,
            "ignore_found": r.ignore_found,
        }

    value = resultcache.cached(CHECK + "-registry", RESULT_VERSION, (sys.version, data), compute)
    if not value["parsed"]:
        return None
    return Registry(
        dict(value["annotations"]),
        dict(value["entries"]),
        dict(value["ignored"]),
        bool(value["ignore_found"]),
    )


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _assignment(node: ast.stmt) -> tuple[str | None, ast.expr | None]:
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id, node.value
    if (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
    ):
        return node.targets[0].id, node.value
    return None, None


def _ignore_list(fn: ast.FunctionDef) -> tuple[bool, dict[str, int]]:
    """The literal collection in ``compile_factors`` that a membership test (``x in NAME``) reads."""
    tested = {
        c.id
        for node in ast.walk(fn)
        if isinstance(node, ast.Compare)
        and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
        for c in node.comparators
        if isinstance(c, ast.Name)
    }
    for node in ast.walk(fn):
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        name, value = _assignment(node)
        if name in tested and isinstance(value, (ast.Set, ast.List, ast.Tuple)):
            return True, {
                e.value: e.lineno
                for e in value.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            }
    return False, {}


@record
class _Aliases:
    """How a module names ``os``, ``os.environ``, ``os.getenv`` and ``vllm.envs``."""

    os: set[str] = field(default_factory=set)
    environ: set[str] = field(default_factory=set)
    getenv: set[str] = field(default_factory=set)
    envs: set[str] = field(default_factory=set)  # names bound to the vllm.envs module
    vllm: set[str] = field(default_factory=set)  # names bound to the vllm package (vllm.envs.X)
    from_envs: dict[str, str] = field(
        default_factory=dict
    )  # local name -> knob (from vllm.envs import X)
    constants: dict[str, str] = field(default_factory=dict)  # module-level NAME = "string"


def _aliases(tree: ast.Module) -> _Aliases:
    a = _Aliases()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "os":
                    a.os.add(alias.asname or "os")
                elif alias.name == "vllm.envs":
                    (a.envs if alias.asname else a.vllm).add(alias.asname or "vllm")
                elif (alias.name == "vllm" or alias.name.startswith("vllm.")) and not alias.asname:
                    a.vllm.add("vllm")
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            for alias in node.names:
                local = alias.asname or alias.name
                if node.module == "os" and alias.name == "environ":
                    a.environ.add(local)
                elif node.module == "os" and alias.name == "getenv":
                    a.getenv.add(local)
                elif node.module == "vllm" and alias.name == "envs":
                    a.envs.add(local)
                elif node.module == "vllm.envs":
                    a.from_envs[local] = alias.name
    for node in tree.body:
        name, value = _assignment(node)
        if name and isinstance(value, ast.Constant) and isinstance(value.value, str):
            a.constants[name] = value.value
    return a


@record(frozen=True)
class KnobUse:
    """A knob on an added line: how it is read, where, and by which row."""

    knob: str
    how: str  # "bare" | "envs" | "indirect"
    path: bytes
    line: int
    row: str


def _is_member(node: ast.expr, bare: set[str], attr: str, modules: set[str]) -> bool:
    """``node`` names ``attr`` of a module: bare (``from os import environ``) or ``<module>.<attr>``."""
    if isinstance(node, ast.Name):
        return node.id in bare
    return (
        isinstance(node, ast.Attribute)
        and node.attr == attr
        and isinstance(node.value, ast.Name)
        and node.value.id in modules
    )


def _is_environ(node: ast.expr, a: _Aliases) -> bool:
    return _is_member(node, a.environ, "environ", a.os)


def _is_getenv(node: ast.expr, a: _Aliases) -> bool:
    return _is_member(node, a.getenv, "getenv", a.os)


def _is_envs_module(node: ast.expr, a: _Aliases) -> bool:
    return _is_member(node, a.envs, "envs", a.vllm)


def _string(node: ast.expr | None, a: _Aliases) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return a.constants.get(node.id)
    return None


def knob_sites(tree: ast.Module, prefixes: tuple[str, ...]) -> dict[str, Any]:
    """Every place in the module that reads a knob, whoever wrote the line (JSON, cacheable).

    ``direct``: ``[knob, how, line, end_line]`` in walk order; ``scopes``: per function that hands
    ``os.environ`` on as a value, the spans of those uses and the knobs the function names. Pure in
    (the module's bytes, the prefixes): which row owns a line is applied by :func:`uses_at`.
    """
    a = _aliases(tree)
    direct: list[list[Any]] = []

    def span(node: ast.AST) -> list[int]:
        line: int = node.lineno  # type: ignore[attr-defined]
        return [line, getattr(node, "end_lineno", None) or line]

    def add(knob: str | None, how: str, node: ast.AST) -> None:
        if knob is not None and knob.startswith(prefixes):
            direct.append([knob, how, *span(node)])

    handled: set[int] = set()  # ids of environ nodes read directly (not passed on as a value)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if _is_getenv(func, a):
                add(_string(node.args[0] if node.args else None, a), "bare", node)
            elif (
                isinstance(func, ast.Attribute)
                and func.attr in ("get", "setdefault", "pop", "__getitem__")
                and _is_environ(func.value, a)
            ):
                handled.add(id(func.value))
                add(_string(node.args[0] if node.args else None, a), "bare", node)
        elif isinstance(node, ast.Subscript) and _is_environ(node.value, a):
            handled.add(id(node.value))
            if isinstance(node.ctx, ast.Load):
                add(_string(node.slice, a), "bare", node)
        elif isinstance(node, ast.Compare) and any(_is_environ(c, a) for c in node.comparators):
            handled.update(id(c) for c in node.comparators)
            add(_string(node.left, a), "bare", node)
        elif isinstance(node, ast.Attribute) and _is_envs_module(node.value, a):
            add(node.attr, "envs", node)
        elif isinstance(node, ast.ImportFrom) and node.module == "vllm.envs":
            for alias in node.names:
                add(alias.name, "envs", node)
    # os.environ handed on as a value: the knobs named in the same function are read through it.
    scopes: list[dict[str, Any]] = []
    for scope in ast.walk(tree):
        if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        loose = [
            span(n)
            for n in ast.walk(scope)
            if isinstance(n, (ast.Name, ast.Attribute))
            and _is_environ(n, a)
            and id(n) not in handled
        ]
        if not loose:
            continue
        named = sorted(
            {
                n.value
                for n in ast.walk(scope)
                if isinstance(n, ast.Constant)
                and isinstance(n.value, str)
                and n.value.startswith(prefixes)
            }
        )
        if named:
            scopes.append({"loose": loose, "named": named})
    return {"direct": direct, "scopes": scopes}


def uses_at(sites: dict[str, Any], path: bytes, analysis: Analysis) -> list[KnobUse]:
    """The sites on lines the rows added, each with its row."""
    prov = analysis.prov
    out: list[KnobUse] = []
    for knob, how, line, end in sites["direct"]:
        row = prov.owner_of_span(path, line, end)
        if row is not None:
            out.append(KnobUse(knob, how, path, line, row))
    for scope in sites["scopes"]:
        owned = [
            (line, row)
            for line, end in scope["loose"]
            if (row := prov.owner_of_span(path, line, end)) is not None
        ]
        if owned:
            line, row = owned[0]
            out += [KnobUse(knob, "indirect", path, line, row) for knob in scope["named"]]
    return out


def _sites_of(analysis: Analysis, path: bytes, data: bytes, prefixes: tuple[str, ...]) -> Any:
    """knob_sites of a patched file through the result cache (None: it does not parse)."""

    def compute() -> dict[str, Any]:
        tree = analysis.tree(path)
        return {"sites": None if tree is None else knob_sites(tree, prefixes)}

    parts = (sys.version, path, data, "\0".join(prefixes))
    return resultcache.cached(CHECK + "-sites", RESULT_VERSION, parts, compute)["sites"]


@record
class KnobReport:
    """What the knob check found, with the registry's size before and after the series."""

    findings: list[StaticFinding]
    entries_before: int | None  # None: no vllm/envs.py in the tree
    entries_after: int | None
    registered_by_rows: dict[str, str]  # knob -> row
    uses: list[KnobUse]
    waived: dict[str, str] = field(
        default_factory=dict
    )  # declared runtime knob -> the row keeping it off
    # knob -> (row, reason): kept off the key under a comment the row wrote (series/knobcomments.py)
    commented: dict[str, tuple[str, str]] = field(default_factory=dict)


def knob_report(
    analysis: Analysis, prefixes: Iterable[str] = (), runtime: Mapping[str, int] | None = None
) -> KnobReport:
    """``runtime``: the manifest's declared runtime knobs (name -> manifest line), which a row may keep
    on compile_factors' ignore list; a declared knob no row keeps off the key is a stale waiver."""
    uses = _knob_uses(analysis, tuple(dict.fromkeys((*DEFAULT_PREFIXES, *prefixes))))
    registry, envs = _registry(analysis, uses)
    checked = _RegistryCheck()
    if registry is not None:
        checked = _check_registry(analysis.prov, registry, envs, runtime or {})
    found = [*checked.found, *_use_findings(uses, registry), *_indirect_findings(uses)]
    return KnobReport(
        found,
        checked.before,
        checked.after,
        checked.by_rows,
        uses,
        checked.waived,
        checked.commented,
    )


def _knob_uses(analysis: Analysis, prefixes: tuple[str, ...]) -> list[KnobUse]:
    """Every knob read on the lines the rows add, outside vllm/envs.py (a file is parsed only when
    an added line could read one)."""
    prov = analysis.prov
    uses: list[KnobUse] = []
    for path in prov.files():
        if not path.endswith(b".py") or path == ENVS:
            continue
        data = prov.content[path] or b""
        lines = data.splitlines()
        added = [lines[n - 1] for n, _ in prov.added_lines(path) if n <= len(lines)]
        if not any(h in text for text in added for h in _HINTS):
            continue
        sites = _sites_of(analysis, path, data, prefixes)
        if sites is not None:
            uses += uses_at(sites, path, analysis)
    return uses


def _registry(analysis: Analysis, uses: list[KnobUse]) -> tuple[Registry | None, bytes | None]:
    """vllm/envs.py after the series (the release's, when no row touches it) and its registry, when
    a row touches it or reads a knob through it."""
    prov = analysis.prov
    if ENVS not in prov.content and not any(u.how == "envs" for u in uses):
        return None, None
    envs: bytes | None = None
    if ENVS in prov.content:
        envs = prov.content[ENVS]
    elif analysis.read is not None:
        envs = analysis.read(ENVS)
    return (registry_of(envs) if envs is not None else None), envs


@record
class _RegistryCheck:
    """What the registry's checks found, and what they tell the report."""

    found: list[StaticFinding] = field(default_factory=list)
    before: int | None = None  # None: no vllm/envs.py in the tree
    after: int | None = None
    by_rows: dict[str, str] = field(default_factory=dict)  # knob -> the row registering it
    waived: dict[str, str] = field(default_factory=dict)  # declared runtime knob -> its row
    commented: dict[str, tuple[str, str]] = field(default_factory=dict)  # knob -> (row, reason)


def _check_registry(
    prov: Provenance, registry: Registry, envs: bytes | None, runtime: Mapping[str, int]
) -> _RegistryCheck:
    """vllm/envs.py's registry after the series: the rows' knobs have both halves and stay on the
    compile cache key, and every declared runtime knob is kept off it by some row."""
    out = _RegistryCheck(after=len(registry.entries))
    for name, line in registry.entries.items():
        row = prov.owner(ENVS, line)
        if row is not None:
            out.by_rows[name] = row
    out.before = len(registry.entries) - len(out.by_rows)
    count = f"environment_variables: {out.before} entries before the series, {out.after} after"
    for name, row in out.by_rows.items():
        if name not in registry.annotations:
            out.found.append(
                StaticFinding(
                    CHECK,
                    "error",
                    row,
                    ENVS,
                    registry.entries[name],
                    f"{name} is registered without its annotation in the `if TYPE_CHECKING:` "
                    "block (type checkers and `envs.X` readers see no type)",
                    count,
                )
            )
        if name in registry.ignored:
            _check_ignored(prov, registry, envs, runtime, name, row, count, out)
    for name, line in registry.annotations.items():
        row = prov.owner(ENVS, line)
        if row is not None and name not in registry.entries:
            out.found.append(
                StaticFinding(
                    CHECK,
                    "error",
                    row,
                    ENVS,
                    line,
                    f"{name} is annotated but has no environment_variables entry: "
                    "vllm.envs raises AttributeError when it is read",
                    count,
                )
            )
    out.found += _stale_waivers(prov, registry, runtime, out.waived)
    if out.by_rows and not registry.ignore_found:
        out.found.append(
            StaticFinding(
                CHECK,
                "warning",
                None,
                ENVS,
                None,
                "no ignore list found in compile_factors(): cannot tell whether the rows' knobs "
                "are in the compile cache key",
            )
        )
    return out


def _check_ignored(
    prov: Provenance,
    registry: Registry,
    envs: bytes | None,
    runtime: Mapping[str, int],
    name: str,
    row: str,
    count: str,
    out: _RegistryCheck,
) -> None:
    """A row's knob on compile_factors' ignore list: waived when the manifest declares it a runtime
    knob, explained when the row's comment says why (series/knobcomments.py), else an error."""
    where = prov.owner(ENVS, registry.ignored[name])
    if name in runtime and where is not None:
        out.waived[name] = where
        return
    reason = _comment_reason(prov, envs, registry.ignored[name], where)
    if reason is not None and where is not None:
        out.commented[name] = (where, reason)
        return
    by = f"row {where}" if where else "the pristine list"
    out.found.append(
        StaticFinding(
            CHECK,
            "error",
            row,
            ENVS,
            registry.ignored[name],
            f"{name} is on compile_factors' ignore list ({by}): a knob that changes "
            "generated code must be part of the compile cache key (one read at run "
            "time only may be declared in the manifest's runtime_knobs, with its reason)",
            count,
        )
    )


def _stale_waivers(
    prov: Provenance, registry: Registry, runtime: Mapping[str, int], waived: Mapping[str, str]
) -> list[StaticFinding]:
    """Declared runtime knobs that no row keeps off compile_factors' key."""
    found: list[StaticFinding] = []
    for name, line in runtime.items():
        if name in waived:
            continue
        where = prov.owner(ENVS, registry.ignored[name]) if name in registry.ignored else None
        if where is None:
            found.append(
                StaticFinding(
                    CHECK,
                    "error",
                    None,
                    b"patches/manifest.yaml",
                    line,
                    f"runtime_knobs declares {name}, but no row keeps it off compile_factors' "
                    "key: a stale waiver; remove it from runtime_knobs",
                )
            )
    return found


def _use_findings(uses: list[KnobUse], registry: Registry | None) -> list[StaticFinding]:
    """A knob read through vllm.envs must be registered; one read from os.environ directly is an
    error (indirect reads are summed up per site by :func:`_indirect_findings`)."""
    found: list[StaticFinding] = []
    for use in uses:
        registered = registry is not None and use.knob in registry.entries
        if use.how == "envs":
            if not registered:
                found.append(
                    StaticFinding(
                        CHECK,
                        "error",
                        use.row,
                        use.path,
                        use.line,
                        f"{use.knob} is read through vllm.envs but no row registers it in "
                        "vllm/envs.py (vllm.envs raises AttributeError for it)",
                    )
                )
            continue
        unregistered = "" if registered else "; and no row registers it in vllm/envs.py"
        if use.how == "bare":
            found.append(
                StaticFinding(
                    CHECK,
                    "error",
                    use.row,
                    use.path,
                    use.line,
                    f"{use.knob} is read from the environment directly, outside vllm.envs and so "
                    f"outside the compile cache key: read it as envs.{use.knob}{unregistered}",
                )
            )
    return found


def _indirect_findings(uses: list[KnobUse]) -> list[StaticFinding]:
    """One warning per site where os.environ is handed on as a value, naming the knobs read there."""
    indirect: dict[tuple[str, bytes, int], list[str]] = {}
    for use in uses:
        if use.how == "indirect":
            indirect.setdefault((use.row, use.path, use.line), []).append(use.knob)
    return [
        StaticFinding(
            CHECK,
            "warning",
            row,
            path,
            line,
            f"os.environ is handed on as a value where {', '.join(names)} "
            f"{'is' if len(names) == 1 else 'are'} read: not through vllm.envs",
            "the static check cannot follow the variable; pass values read through vllm.envs "
            "in instead (a bare read sits outside the compile cache key)",
        )
        for (row, path, line), names in indirect.items()
    ]


def _comment_reason(prov: Any, data: bytes | None, line: int, row: str | None) -> str | None:
    """The comment ``row`` wrote above its ignore-list entry at ``line`` of envs.py, if any."""
    from hyperqwen_patches.series.knobcomments import comment_above

    if data is None or row is None:
        return None
    texts = data.decode("utf-8", errors="replace").splitlines()
    lo = max(0, line - 60)  # a declaration sits right above its entries; no need to read further
    window = [(texts[i], prov.owner(ENVS, i + 1) == row) for i in range(lo, min(line, len(texts)))]
    return comment_above(window, len(window) - 1)


def check_knobs(ctx: CheckContext) -> list[Finding]:
    """Knobs on added lines are read through vllm.envs, registered (both halves), not compile-ignored."""
    analysis = analysis_of(ctx)
    runtime = {k.name: k.line for k in ctx.manifest.runtime_knobs}
    report = knob_report(analysis, ctx.manifest.knob_prefixes, runtime)
    findings = [f.to_finding() for f in report.findings]
    if report.entries_after:  # a tree with a registry: show its size before and after
        from hyperqwen_patches.checks.context import Finding

        added = ", ".join(sorted(report.registered_by_rows)) or "none"
        waived = ""
        if report.waived:
            waived = "; declared runtime-only, off the compile key: " + ", ".join(
                f"{k} (row {r})" for k, r in sorted(report.waived.items())
            )
        for knob, (row, reason) in sorted(report.commented.items()):
            findings.append(
                Finding(
                    "knobs",
                    "note",
                    show(ENVS),
                    f"{knob} is kept off compile_factors' key by row {row}, declared runtime-only "
                    f"by the comment above it: {reason}",
                )
            )
        findings.append(
            Finding(
                "knobs",
                "note",
                show(ENVS),
                f"environment_variables: {report.entries_before} entries before the series, "
                f"{report.entries_after} after (rows register: {added}){waived}",
            )
        )
    return findings

"""Removed names: identifiers on the added lines that the old pin defines and the target release lacks.

The references of the added lines (``refs.py``: names, attribute chains, imports) are resolved in two
symbol tables (``symbols.py``): the **old** one is the pin with the series applied (so ``self.x``,
a row's own imports and classes resolve as the code will run) and the **new** one the target
release's pristine tree plus the files the series creates (carried over unchanged). A reference is
reported when the old table finds it **at a pristine definition** (a line no row wrote) and the new
table says it is missing: that is a name the port will lose. Names the series defines itself are
skipped (a port conflict shows those), and anything static analysis cannot follow is counted, not
guessed. ``accepted_names`` in the manifest lists names a maintainer has looked at, with a reason.

In ``check`` the old pin is each row's ``cut_against`` and the target the manifest pin: a row cut
against an older release is checked for names that release had and the pin dropped. Rows cut
against the pin have nothing to compare (counted). ``port`` runs the same comparison with the pin
as old and ``--to`` as the target.
"""

from __future__ import annotations

import builtins
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from hyperqwen_patches.engine.overlay import over
from hyperqwen_patches.records import field, record, replace
from hyperqwen_patches.statics.analysis import Analysis, StaticFinding, python_files
from hyperqwen_patches.statics.refs import CallRef, Ref, collect
from hyperqwen_patches.statics.symbols import ClassInfo, Found, Missing, Result, Symbols, Unknown

if TYPE_CHECKING:
    from hyperqwen_patches.checks.context import CheckContext, Finding
    from hyperqwen_patches.series.manifestmodel import Manifest

CHECK = "names"
BUILTINS = frozenset(dir(builtins)) | {"__name__", "__file__", "__doc__", "__spec__", "__package__"}
Reader = Callable[[bytes], bytes | None]


def resolve(symbols: Symbols, ref: Ref) -> Result:
    if ref.self_depth:
        head = symbols.lookup(ref.module, list(ref.attrs[: ref.self_depth]))
        if not isinstance(head, Found) or head.kind != "class":
            return head if not isinstance(head, Found) else Unknown("enclosing class not found")
        lookup = symbols.bases_attr if ref.from_bases else symbols.class_attr
        cur: Result = lookup(
            head.obj,  # type: ignore[arg-type]
            ref.attrs[ref.self_depth],
            via_instance=ref.via_instance,
        )
        for attr in ref.attrs[ref.self_depth + 1 :]:
            if not isinstance(cur, Found):
                return cur
            cur = symbols._attr(cur, attr, depth=0)
        return cur
    if ref.dotted_path:
        return symbols.lookup_dotted([ref.module, *ref.attrs])
    return symbols.lookup(ref.module, list(ref.attrs))


@record
class Views:
    """The old and new symbol tables of one comparison, and the traced series on the old pin."""

    analysis: Analysis
    old: Symbols
    new: Symbols
    old_label: str
    new_label: str
    # Both releases without the series (None: not known), for what upstream itself changed: a
    # signature the two releases share is not a change between them, whatever the series does to it.
    old_pristine: Symbols | None = None
    new_pristine: Symbols | None = None
    # references(), once: both the name and the signature checks read them.
    _references: tuple[list[Ref], list[CallRef]] | None = None

    @classmethod
    def build(
        cls,
        analysis: Analysis,
        old_read: Reader,
        new_read: Reader,
        old_label: str,
        new_label: str,
        package: str = "vllm",
        *,
        old_pristine: Reader | None = None,
        new_pristine: Reader | None = None,
    ) -> Views:
        prov = analysis.prov

        patched = over(prov.content, old_read)

        def carried(path: bytes) -> bytes | None:
            return prov.content[path] if path in prov.created else new_read(path)

        return cls(
            analysis,
            Symbols(patched, package),
            Symbols(carried, package),
            old_label,
            new_label,
            None if old_pristine is None else Symbols(old_pristine, package),
            None if new_pristine is None else Symbols(new_pristine, package),
        )

    def pristine_site(self, found: Found) -> bool:
        """The old definition is the pin's own (not a line or a file a row wrote)."""
        prov = self.analysis.prov
        if found.path in prov.created:
            return False
        return found.line == 0 or prov.owner(found.path, found.line) is None

    def references(self) -> tuple[list[Ref], list[CallRef]]:
        if self._references is None:
            self._references = self._collect_references()
        return self._references

    def _collect_references(self) -> tuple[list[Ref], list[CallRef]]:
        refs: list[Ref] = []
        calls: list[CallRef] = []
        for path in python_files(self.analysis.prov):
            if not any(True for _ in self.analysis.prov.added_lines(path)):
                continue
            tree = self.analysis.tree(path)
            if tree is None:
                continue  # does not parse: the compiles check says so
            r, c = collect(tree, path, self.analysis.prov)
            refs += [x for x in map(self._typed, r) if x is not None]
            calls += [
                replace(x, ref=self._typed(x.ref), skip_reason="parameter of an unresolved type")
                if x.ref is not None and x.ref.annotation is not None
                else x
                for x in c
            ]
        return refs, calls

    def _typed(self, ref: Ref | None) -> Ref | None:
        """A reference rooted at an annotated parameter, as a path through the class it names."""
        if ref is None or ref.annotation is None:
            return ref
        module = self.old.module(ref.module)
        found = self.old.expr(module, ref.annotation) if module is not None else None
        if not isinstance(found, Found) or found.kind != "class":
            return None
        cls = found.obj
        assert isinstance(cls, ClassInfo)
        return replace(
            ref,
            module=cls.module.name,
            attrs=(cls.node.name, *ref.attrs),
            via_instance=True,
            self_depth=1,
            annotation=None,
        )


@record
class NameReport:
    findings: list[StaticFinding]
    stats: Counter[str] = field(default_factory=Counter)

    def summary(self) -> str:
        s = self.stats
        return (
            f"{s['references']} references on added lines: {s['checked']} pristine names checked, "
            f"{s['removed']} removed, {s['accepted']} accepted; skipped {s['series']} the series "
            f"defines, {s['outside']} outside the package, {s['builtin']} builtins, "
            f"{s['unknown'] + s['unknown-new']} not resolvable statically, "
            f"{s['not-in-old']} not in the old pin"
        )


def accepted(names: Iterable[str], dotted: str) -> bool:
    return any(dotted == n or dotted.startswith(n + ".") for n in names)


def removed_names(views: Views, accept: Iterable[str] = ()) -> NameReport:
    accept = tuple(accept)
    refs, _ = views.references()
    report = NameReport([])
    stats = report.stats
    seen: set[tuple[str, bytes, int, str]] = set()
    for ref in refs:
        key = (ref.row, ref.path, ref.line, ref.dotted)
        if key in seen:
            continue
        seen.add(key)
        stats["references"] += 1
        builtin = not ref.dotted_path and not ref.self_depth and ref.attrs[0] in BUILTINS
        if builtin and not isinstance(resolve(views.old, ref), Found):
            stats["builtin"] += 1
            continue
        old = resolve(views.old, ref)
        if isinstance(old, Unknown):
            stats["outside" if "outside" in old.reason else "unknown"] += 1
            continue
        if isinstance(old, Missing):
            stats["not-in-old"] += 1
            continue
        if not views.pristine_site(old):
            stats["series"] += 1
            continue
        stats["checked"] += 1
        new = resolve(views.new, ref)
        if isinstance(new, Unknown):
            stats["unknown-new"] += 1
            continue
        if isinstance(new, Found):
            continue
        if accepted(accept, ref.dotted) or accepted(accept, f"{new.container}.{new.name}"):
            stats["accepted"] += 1
            continue
        stats["removed"] += 1
        report.findings.append(
            StaticFinding(
                CHECK,
                "error",
                ref.row,
                ref.path,
                ref.line,
                f"{ref.text}: {new.container} has no {new.name} in {views.new_label} "
                f"(it exists in {views.old_label})",
                f"resolved as {ref.dotted}; accept it in the manifest's accepted_names with a reason",
            )
        )
    return report


def check_names(ctx: CheckContext) -> list[Finding]:
    """Rows cut against an older release: names that release had and the pin no longer has."""
    from hyperqwen_patches.statics.analysis import analysis_of

    older = _older_rows(ctx.manifest)
    if not older:
        return []
    from hyperqwen_patches.checks.context import Finding
    from hyperqwen_patches.sources.spec import parse_source

    if parse_source(ctx.source).kind != "pypi":
        # The cut releases are fetched from PyPI beside a PyPI pin; a series checked against a directory
        # or a git checkout names no source for them, and guessing one would compare other code.
        return [
            Finding(
                "names",
                "unverified",
                f"cut_against {version}",
                f"not verified: rows {', '.join(sorted(rows))} were cut against {version}, and the "
                f"pristine source {ctx.source} names no source for that release",
            )
            for version, rows in older.items()
        ]
    analysis = analysis_of(ctx)
    findings: list[Finding] = []
    for version, rows in older.items():
        views, close = _cut_views(ctx, analysis, version)
        try:
            report = removed_names(views, (a.name for a in ctx.manifest.accepted_names))
        finally:
            close()
        findings += [f.to_finding() for f in report.findings if f.row in rows]
    return findings


def _older_rows(manifest: Manifest) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for row in manifest.active_rows:
        if row.cut_against != manifest.pin:
            out.setdefault(row.cut_against, set()).add(row.name)
    return out


def _cut_views(
    ctx: CheckContext, analysis: Analysis, version: str
) -> tuple[Views, Callable[[], None]]:
    """Views comparing the release a row was cut against (old) with the pin (new)."""
    from hyperqwen_patches.sources.pristine import open_pristine

    cut = open_pristine(
        f"pypi:{ctx.manifest.package}=={version}",
        package=ctx.manifest.package,
        version=version,
        progress=ctx.progress,
    )
    # The series traced on the pin stands in for "the rows on their cut_against release": the
    # added lines are the same, and the old table only needs to say the name existed there.
    # The new side is the pin as the series leaves it (a row's own widening of a signature holds
    # there), which is what the rows were traced on.
    content = analysis.prov.content

    on_pin = over(content, ctx.pristine.read)

    views = Views.build(
        analysis,
        cut.read,
        on_pin,
        cut.label,
        ctx.pristine.label,
        ctx.manifest.package,
        old_pristine=cut.read,
        new_pristine=ctx.pristine.read,
    )
    return views, cut.close

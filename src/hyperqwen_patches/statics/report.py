"""The static checks as one operation: on the pin (every check, with its counts) and against a
target release (removed names and changed signatures, the pin as the old side).

``check`` runs the checks one by one as pipeline functions and shows their findings; this module
also keeps what a finding list cannot carry: the registry's entry count before and after the series
and how many references and calls were resolved or skipped. ``port`` attaches
:func:`port_statics` to its report; the ``statics`` command prints both (docs/static-checks.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from hyperqwen_patches.records import field, record
from hyperqwen_patches.statics.analysis import Analysis, StaticFinding

if TYPE_CHECKING:
    from collections.abc import Callable

    from hyperqwen_patches.engine.patchmodel import Patch
    from hyperqwen_patches.series.manifestmodel import Manifest
    from hyperqwen_patches.sources.pristinetree import PristineTree


@record
class StaticsReport:
    """What the static checks found on one release (``target`` None: the pin itself)."""

    pin: str
    target: str | None
    findings: list[StaticFinding]
    counts: dict[str, str] = field(default_factory=dict)  # check -> one-line summary
    stats: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity == "error")

    def to_json(self) -> dict[str, Any]:
        return {
            "pin": self.pin,
            "target": self.target,
            "counts": self.counts,
            "stats": self.stats,
            "findings": [f.to_json() for f in self.findings],
        }


def series_patches(manifest: Manifest) -> list[Patch]:
    """The active rows as engine patches, in order (read and parsed once per comparison)."""
    from hyperqwen_patches.series.rows import load_series

    return [s.patch for s in load_series(manifest) if s.patch is not None]


def trace_series(
    manifest: Manifest, tree: PristineTree, patches: list[Patch] | None = None
) -> Analysis:
    """The active rows applied in memory onto ``tree`` (``check``'s policy), traced per line."""
    from hyperqwen_patches.engine.applying import Policy, apply_series
    from hyperqwen_patches.statics.provenance import trace

    patches = series_patches(manifest) if patches is None else patches
    result = apply_series(patches, tree.read, Policy(ambiguity="error"))
    return Analysis(trace(patches, result, tree.read), tree.read)


def carried_reader(patches: list[Patch], tree: PristineTree) -> Callable[[bytes], bytes | None]:
    """The target as the series leaves it: every row that applies there, in order (a row that does
    not apply contributes nothing, as in ``port``'s in-sequence pass). A call a row widens a
    signature for, in its own hunk, is then judged against the widened definition."""
    from hyperqwen_patches.engine.applying import Policy, apply_series
    from hyperqwen_patches.engine.overlay import over

    return over(apply_series(patches, tree.read, Policy(ambiguity="report")).changes, tree.read)


def port_statics(
    manifest: Manifest,
    old: PristineTree,
    new: PristineTree,
    analysis: Analysis | None = None,
    patches: list[Patch] | None = None,
) -> StaticsReport:
    """Removed names and changed signatures of the series' added lines, pin (``old``) -> ``new``."""
    from hyperqwen_patches.statics.names import Views, removed_names
    from hyperqwen_patches.statics.signatures import changed_signatures

    patches = series_patches(manifest) if patches is None else patches
    analysis = analysis or trace_series(manifest, old, patches)
    views = Views.build(
        analysis,
        old.read,
        carried_reader(patches, new),
        old.label,
        new.label,
        manifest.package,
        old_pristine=old.read,
        new_pristine=new.read,
    )
    accept = tuple(a.name for a in manifest.accepted_names)
    names = removed_names(views, accept)
    sigs = changed_signatures(views, accept)
    return StaticsReport(
        pin=manifest.pin,
        target=new.label,
        findings=names.findings + sigs.findings,
        counts={"names": names.summary(), "signatures": sigs.summary()},
        stats={"names": dict(names.stats), "signatures": dict(sigs.stats)},
    )


def pin_statics(manifest: Manifest, pin: PristineTree) -> StaticsReport:
    """Every static check on the pin, with the knob registry's size before and after the series."""
    from hyperqwen_patches.series.rows import load_series
    from hyperqwen_patches.statics.compiles import compile_findings
    from hyperqwen_patches.statics.gitapply import gitapply_findings
    from hyperqwen_patches.statics.knobs import knob_report
    from hyperqwen_patches.statics.whitespace import whitespace_findings

    analysis = trace_series(manifest, pin)
    series = load_series(manifest)
    patches = [s.patch for s in series if s.patch is not None]
    knobs = knob_report(
        analysis, manifest.knob_prefixes, {k.name: k.line for k in manifest.runtime_knobs}
    )
    findings = compile_findings(analysis.prov, pin.read) + knobs.findings
    findings += whitespace_findings(patches, {})
    findings += gitapply_findings(manifest, series, pin.read)
    python = [p for p in analysis.prov.files() if p.endswith(b".py")]
    counts = {
        "compiles": f"{len(python)} Python files touched or added by the series compiled",
        "knobs": (
            f"environment_variables: {knobs.entries_before} entries before the series, "
            f"{knobs.entries_after} after; rows register {len(knobs.registered_by_rows)} "
            f"({', '.join(sorted(knobs.registered_by_rows)) or 'none'})"
            if knobs.entries_after is not None
            else "no vllm/envs.py in the tree"
        ),
        "git-apply": f"{sum(1 for r in manifest.active_rows if r.git_apply)} rows marked git_apply",
    }
    return StaticsReport(pin=manifest.pin, target=None, findings=findings, counts=counts)


def run_statics(
    root: Path, to_versions: list[str], *, source: str | None = None, progress: Any = None
) -> list[StaticsReport]:
    """The pin's report, then one per ``--to`` release (names and signatures against it)."""
    from hyperqwen_patches.series.manifest import load_manifest
    from hyperqwen_patches.sources.pristine import open_pristine

    manifest = load_manifest(root)
    reports: list[StaticsReport] = []
    with open_pristine(
        source or manifest.source,
        package=manifest.package,
        version=manifest.pin,
        progress=progress,
    ) as pin:
        reports.append(pin_statics(manifest, pin))
        patches = series_patches(manifest) if to_versions else None
        analysis = trace_series(manifest, pin, patches) if to_versions else None
        for version in to_versions:
            with open_pristine(
                f"pypi:{manifest.package}=={version}",
                package=manifest.package,
                version=version,
                progress=progress,
            ) as new:
                reports.append(port_statics(manifest, pin, new, analysis, patches))
    return reports


def report_lines(r: StaticsReport) -> list[str]:
    """One report as markdown list items: each check's counts, then each finding."""
    lines = [f"- {check}: {text}" for check, text in r.counts.items()]
    if not r.findings:
        lines.append("- findings: none")
    lines += [f"- **{f.severity}** [{f.check}] {f.subject}: {f.message}" for f in r.findings]
    return lines


def render_markdown(reports: list[StaticsReport]) -> str:
    """The static-check section of docs/port-matrix.md: one block per release."""
    lines: list[str] = []
    for r in reports:
        title = f"{r.pin} (the pin)" if r.target is None else f"{r.pin} -> {r.target}"
        lines += [f"### {title}", "", *report_lines(r), ""]
    return "\n".join(lines)

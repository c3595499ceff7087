"""The port report as a markdown document (``port --markdown FILE``, docs/port-matrix.md).

Pure: a :class:`~hyperqwen_patches.port.model.PortReport` in, text out. Stable output (no dates, rows in series
order) so a re-run on the same inputs gives the same file.
"""

from __future__ import annotations

from hyperqwen_patches.console import show
from hyperqwen_patches.port.model import Attempt, HunkVerdict, PortReport, RebaseResult, RowPort

STATUS_WORDS = {
    "exact": "applies exactly",
    "offset": "applies at an offset",
    "upstream": "already upstream",
    "partly-upstream": "partly upstream",
    "conflicts": "conflicts",
    "skipped": "skipped (manifest)",
}


def cell(text: str) -> str:
    """A markdown table cell: pipes escaped, line breaks folded."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def fence(body: str, lang: str = "diff") -> str:
    """A fenced block long enough that the body's own backticks cannot close it."""
    ticks = "```"
    while ticks in body:
        ticks += "`"
    if not body.endswith("\n"):
        body += "\n"
    return f"{ticks}{lang}\n{body}{ticks}\n"


def count_line(report: PortReport) -> str:
    """ "8 exact, 26 offset, 16 conflicts (2 of them by cascade)": the rows per status."""
    counts = dict(report.counts)
    cascade = counts.pop("conflicts_by_cascade", 0)
    changed = counts.pop("upstream_in_changed_form", 0)
    line = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    if cascade:
        line += f" ({cascade} of the conflicts by cascade from earlier rows)"
    if changed:
        line += (
            f" ({changed} of the conflicts upstream in changed form: every added line is in the "
            "release, re-indented or reformatted; review them for retirement)"
        )
    return line


def hunk_counts(attempt: Attempt) -> str:
    parts = [
        f"{attempt.count(s)} {s}"
        for s in ("exact", "offset", "upstream", "conflict")
        if attempt.count(s)
    ]
    return ", ".join(parts) or "-"


def row_line(row: RowPort) -> str:
    alone = "same" if not row.differs else STATUS_WORDS[row.alone.status]
    changed = ", ".join(f"`{show(d.path)}` {d.status}" for d in row.changed_files) or "none"
    return (
        f"| {row.position} | {cell(row.name)} | {row.status} | {cell(alone)} | "
        f"{hunk_counts(row.in_sequence)} | {cell(changed)} |"
    )


def _hunk_section(h: HunkVerdict) -> list[str]:
    gnu = f"; GNU patch: FAILED at {h.reported_line}" if h.reported_line is not None else ""
    where = f"`{show(h.path)}` hunk #{h.number} (stated line {h.stated_line}{gnu})"
    out: list[str] = []
    if h.status in ("exact", "offset"):
        ambiguous = (
            f"; its preimage also matches at line(s) {h.others_text()}" if h.other_matches else ""
        )
        if h.status == "offset" or ambiguous:
            out.append(f"- {where}: applies at line {h.line} (offset {h.offset}){ambiguous}")
        return out
    if h.status == "upstream":
        out.append(f"- {where}: **already upstream**: {h.cause}")
    else:
        out.append(f"- {where}: **conflict**: {h.cause}")
        if h.aligned:
            out.append("")
            out.append(
                f"  The hunk's preimage (`-`) against the new release (`+`) where it nearly fits, "
                f"from line {h.aligned_line}:"
            )
            out.append("")
            out += ["  " + line if line else "" for line in fence(show(h.aligned)).splitlines()]
    if h.pristine_diff:
        out.append("")
        out.append("  What changed there between the releases (old → new pristine):")
        out.append("")
        out += ["  " + line if line else "" for line in fence(show(h.pristine_diff)).splitlines()]
    elif h.status == "conflict":
        out.append("")
        out.append(
            "  The pristine trees do not differ around the hunk's region: the mismatch comes from "
            "an earlier row in the sequence or from a change elsewhere in the file."
        )
    out.append("")
    return out


def _row_section(row: RowPort, report: PortReport) -> list[str]:
    out = [f"### {row.position}. {row.name}: {STATUS_WORDS[row.status]}", ""]
    if row.skip is not None:
        out += [f"Skipped in the manifest: {row.skip}", ""]
        return out
    if row.differs:
        out.append(
            f"In sequence: {STATUS_WORDS[row.in_sequence.status]}; alone on the pristine "
            f"{report.to_version} tree: {STATUS_WORDS[row.alone.status]}."
        )
        out.append("")
    if row.drift:
        out.append("Files the row touches, between the releases:")
        out.append("")
        out += [f"- {d.describe()}" for d in row.drift]
        out.append("")
    for f in row.in_sequence.files:
        if f.error:
            out.append(f"- `{show(f.path)}` ({f.action}): **{f.status}**: {f.error}")
            out.append("")
        for h in f.hunks:
            out += _hunk_section(h)
    if out[-1] != "":
        out.append("")
    return out


def render_markdown(
    report: PortReport, *, heading_level: int = 1, rebased: RebaseResult | None = None
) -> str:
    """The whole report; ``heading_level`` 2 nests it under a document's own title."""
    h = "#" * heading_level
    counts = count_line(report) or "no rows"
    lines = [
        f"{h} {report.package} {report.from_version} → {report.to_version}",
        "",
        f"From `{report.from_label}` to `{report.to_label}`: {counts}.",
        "",
    ]
    if not report.rows:
        lines += ["The series has no rows.", ""]
        return "\n".join(lines)
    lines += [
        "Status is the row in series order (on the new release plus the rows before it that went "
        "through); *alone* is the row on the pristine new release by itself, when that differs.",
        "",
        "| # | row | status | alone | hunks | files changed upstream |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += [row_line(r) for r in report.rows]
    lines.append("")
    candidates = report.retirement_candidates
    if candidates:
        lines += [
            "Retirement candidates (the release carries them; add the upstream reference and "
            "reason, then move them into the manifest's `retirements:`):",
            "",
        ]
        lines += fence("".join(c.to_yaml() for c in candidates), "yaml").splitlines()
        lines.append("")
    if report.statics is not None:
        from hyperqwen_patches.statics.report import report_lines

        lines += [
            f"{h}# Static checks against {report.to_version}",
            "",
            "Names the series' added lines use that the release no longer has, and calls whose "
            "signature changed (docs/static-checks.md):",
            "",
            *report_lines(report.statics),
            "",
        ]
    if rebased is not None:
        lines += [
            f"Rebased: branch `{rebased.branch}` on base `{rebased.base}`, "
            f"{len(rebased.commits)} commit(s), tip `{rebased.tip}`.",
            "",
        ]
        lines += [f"- `{sha}` {row} ({how})" for row, sha, how in rebased.commits]
        lines.append("")
        if rebased.adjacent:
            lines += [
                f"- {row}: `{show(path)}:{line}` merged next to an upstream change ({what}): review"
                for row, path, line, what in rebased.adjacent
            ]
            lines.append("")
    for row in report.rows:
        interesting = (
            row.status not in ("exact",)
            or row.differs
            or row.changed_files
            or any(hv.other_matches for hv in row.in_sequence.hunks)
        )
        if interesting:
            lines += [
                ("#" * (heading_level + 1)) + line[3:] if line.startswith("### ") else line
                for line in _row_section(row, report)
            ]
    return "\n".join(lines).rstrip("\n") + "\n"


def render_matrix(reports: list[PortReport]) -> str:
    """Several releases in one document: a row x release matrix, then each release's report."""
    assert reports
    first = reports[0]
    versions = [r.to_version for r in reports]
    lines = [
        f"# Port matrix: {first.package} {first.from_version} → {', '.join(versions)}",
        "",
        "Each cell is the row's status in series order on that release (see the release's section "
        "for every hunk, the cause of each conflict and the pristine diff around it).",
        "",
        "| # | row | " + " | ".join(versions) + " |",
        "| --- | --- | " + " | ".join("---" for _ in versions) + " |",
    ]
    for i, row in enumerate(first.rows):
        cells = []
        for report in reports:
            other = report.rows[i]
            mark = other.status + (" (alone: " + other.alone.status + ")" if other.differs else "")
            cells.append(mark)
        lines.append(f"| {row.position} | {cell(row.name)} | " + " | ".join(cells) + " |")
    if not first.rows:
        lines.append("")
        lines.append("The series has no rows.")
    lines.append("")
    for report in reports:
        lines.append(render_markdown(report, heading_level=2).rstrip("\n"))
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"

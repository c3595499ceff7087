"""GitHub workflow annotations: ``::error file=F,line=L,title=T::message`` lines on stderr, so each
finding shows on the file and line it concerns in a pull request.

On in GitHub Actions (``GITHUB_ACTIONS=true``) or on request (``HQP_ANNOTATIONS=github``); any other
value of ``HQP_ANNOTATIONS`` turns them off (docs/environment.md). The syntax and its escapes are
GitHub's "workflow commands": ``%``, CR and LF escaped in the message, ``:`` and ``,`` as well in a
property value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hyperqwen_patches.checks.context import Finding
    from hyperqwen_patches.series.manifestmodel import Problem

# A finding's severity -> the annotation's level; notes are not annotated.
LEVELS = {"error": "error", "problem": "error", "warning": "warning", "unverified": "warning"}


def wanted() -> bool:
    given = os.environ.get("HQP_ANNOTATIONS", "")
    return given == "github" or (given == "" and os.environ.get("GITHUB_ACTIONS") == "true")


def _escape(text: str, *, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def command(
    level: str, message: str, *, title: str, file: str | None = None, line: int | None = None
) -> str:
    """One workflow command; ``file`` (repository-relative) and ``line`` where known."""
    props = []
    if file:
        props.append(f"file={_escape(file, prop=True)}")
        if line:
            props.append(f"line={line}")
    props.append(f"title={_escape(title, prop=True)}")
    return f"::{level} {','.join(props)}::{_escape(message)}"


# "PATH:LINE" as findings write a place ("patches/0002-x.patch:114: does not apply ...").
_PLACE = re.compile(r"(?<![\w./-])(?P<path>[\w./+-]+):(?P<line>\d+)\b")
_PATCH_LINE = re.compile(r"\bpatch line (\d+)")
_ROW_SUBJECT = re.compile(r"^(?:row )?(?P<row>[^\s:]+)")
_PATH_SUBJECT = re.compile(r"^(?P<path>[^\s:]+)(?::(?P<line>\d+))?$")


def locate(
    subject: str, text: str, repo: Path, row_files: Mapping[str, str]
) -> tuple[str | None, int | None]:
    """The repository file and line a finding is about: its subject when that is ``path[:line]``, or
    the file of the row it names; the line from the first ``that-file:N`` (or ``patch line N``) in
    its text. A file that is not in the repository gives no place (the run is annotated instead)."""
    named = _ROW_SUBJECT.match(subject)
    path: str | None
    line: int | None = None
    if named and named["row"] in row_files:
        path = row_files[named["row"]]
    elif (match := _PATH_SUBJECT.match(subject)) is not None:
        path = match["path"]
        line = int(match["line"]) if match["line"] else None
    else:
        path = None
    if path is None or not (repo / path).is_file():
        return None, None
    if line is None:
        for place in _PLACE.finditer(text):
            if place["path"] == path:
                line = int(place["line"])
                break
        else:
            at = _PATCH_LINE.search(text)
            line = int(at.group(1)) if at else None
    return path, line


def for_findings(
    findings: Iterable[Finding], repo: Path, row_files: Mapping[str, str]
) -> list[str]:
    """One command per error or warning finding; notes are left out."""
    lines = []
    for f in findings:
        level = LEVELS.get(f.severity)
        if level is None:
            continue
        body = f.message + (f"\n{f.detail.rstrip()}" if f.detail else "")
        path, line = locate(f.subject, f"{f.message}\n{f.detail}", repo, row_files)
        title = f"check [{f.check}] {f.subject}"
        lines.append(command(level, body, title=title, file=path, line=line))
    return lines


def for_problems(problems: Sequence[Problem]) -> list[str]:
    """One error per manifest problem, on the manifest's line (file and line as the problem names
    them: repository-relative where the manifest is in the repository)."""
    return [
        command(
            "error",
            f"{p.field}: {p.message}" if p.field else p.message,
            title="manifest",
            file=p.path,
            line=p.line or None,
        )
        for p in problems
    ]

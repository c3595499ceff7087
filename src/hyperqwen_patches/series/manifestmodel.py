"""The manifest's model: its keys and value patterns, the typed records a validated manifest becomes
(``Manifest``, ``Row``, ``ExportPoint``, ...), and ``ManifestError`` with every ``Problem`` located.

Built by the validator (``validation.py``) or read back from the result cache (``manifestcache.py``);
``manifest.load_manifest`` is the way in. The schema is documented in ``docs/manifest.md`` and published
for editors as ``manifest.schema.json``; a test keeps the two in step with the key sets and patterns here.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.lazypattern import LazyPattern
from hyperqwen_patches.records import record

TYPE_CHECKING = False  # not typing's: a plain run never imports typing (a few ms of every start)
if TYPE_CHECKING:
    from typing import Any


MANIFEST_RELPATH = "patches/manifest.yaml"
FORMAT = 1
KINDS: tuple[str, ...] = ("backport", "fix", "feature", "local", "own")
PATH_CONVENTIONS: tuple[str, ...] = ("root", "package")

TOP_REQUIRED = ("format", "pin", "package", "rows")
TOP_OPTIONAL = (
    "source",
    "paths",
    "export_points",
    "retirements",
    "knob_prefixes",
    "accepted_names",
    "runtime_knobs",
    "series",
    "requirements",
    "checksums",
    "series_tail",
)
EXPORT_POINT_REQUIRED = ("name", "branch")
EXPORT_POINT_OPTIONAL = ("commit", "base")
ROW_REQUIRED = ("name", "kind", "what", "cut_against", "retires_when")
ROW_OPTIONAL = (
    "patch",
    "files",
    "upstream",
    "export_point",
    "commit",
    "skip",
    "git_apply",
    "unset",
    "series_comment",
    "series_options",
    "series_line_comment",
)
# Where the apply order is written unless the manifest's ``series`` names another file; the series
# directory (the file's parent) is what entries are relative to (quilt's convention).
DEFAULT_SERIES = "patches/series"
# The file whose ``<package>==`` line must equal the pin (invariant 1), unless ``requirements: null``.
DEFAULT_REQUIREMENTS = "docker/requirements.txt"
# The only option an entry may carry: quilt writes -p1 after a name, and every row applies with -p1.
SERIES_OPTIONS = ("-p1",)
# Fields `adopt` may have had to fill in with a default (no header line in the patch): `unset` names them.
UNSET_FIELDS = ("kind", "what", "upstream", "cut_against", "retires_when")
RETIREMENT_REQUIRED = ("row", "pin", "upstream", "reason", "evidence")
RETIREMENT_OPTIONAL = ("hunk",)
ACCEPTED_NAME_REQUIRED = ("name", "reason")


# Patterns end in \Z, not $: "$" also matches before a final newline, so "abc\n" would pass as a name
# (and then rewrite a branch named with a newline).
# A registered environment knob (vllm/envs.py).
KNOB_RE = LazyPattern(r"^[A-Z][A-Z0-9_]*\Z")

NAME_RE = LazyPattern(r"^[a-z0-9][a-z0-9._-]{0,99}\Z")
PACKAGE_RE = LazyPattern(r"^[A-Za-z0-9][A-Za-z0-9._-]*\Z")
# PEP 440 public versions as vLLM writes them (0.29.0, 0.30.0rc1, 0.29.0.post1); not a full PEP 440 parser.
VERSION_RE = LazyPattern(r"^[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?\Z")
# cut_against: a version, optionally followed by a maintainer's note after ":", ",", ";" or a space
# ("0.31.0: adapted to #54809", "0.30.0, hand-resolved against #53110"), as shell-kept series write it.
CUT_RE = LazyPattern(
    r"^(?P<version>[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?)"
    r"(?:(?:\s*[:,;]|\s)\s*(?P<note>\S.*))?\Z",
    re.S,
)
# Full SHA-1 or SHA-256 object names only: an abbreviated SHA can become ambiguous as the fork grows.
COMMIT_RE = LazyPattern(r"^([0-9a-f]{40}|[0-9a-f]{64})\Z")
# An environment knob prefix (VLLM_ and KVARN_ are always knobs; the manifest may add more).
KNOB_PREFIX_RE = LazyPattern(r"^[A-Z][A-Z0-9_]*_\Z")
# A dotted name in the package (vllm.config.cache.CacheConfig.block_size).
DOTTED_RE = LazyPattern(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+\Z")
PATCH_SUFFIXES = (".patch", ".diff")
# What the series file may carry besides entries: whole-line comments and blank lines (quilt's format).
SERIES_COMMENT_RE = LazyPattern(r"^((#[^\n]*)?\n)+\Z")
SERIES_COMMENT_SHAPE = "holds only '#' comment lines and blank lines, each ending in a newline"
# A comment after an entry on its line, with the white space before it (quilt: `name -p1  # why`).
SERIES_LINE_COMMENT_RE = LazyPattern(r"^[ \t]+#[^\n]*\Z")


@record(frozen=True)
class Problem:
    """One thing wrong with the manifest, located in it."""

    path: str  # the manifest file as shown to a person (repo-relative where possible)
    line: int  # 1-based; 0 when the problem has no position (an unreadable file)
    field: str  # a dotted path such as "rows[2].kind"; "" for the whole document
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return (
            f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
        )


class ManifestError(UsageError):
    """The manifest cannot be read or is invalid; ``problems`` holds every problem found."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        head = problems[0].path if problems else MANIFEST_RELPATH
        noun = "problem" if len(problems) == 1 else "problems"
        lines = [f"{head}: {len(problems)} {noun} in the manifest"]
        lines += [f"  {p}" for p in problems]
        super().__init__(
            "\n".join(lines), hint="the manifest's keys are described in docs/manifest.md"
        )

    def json_fields(self) -> dict[str, object]:
        return {
            "problems": [
                {"path": p.path, "line": p.line, "field": p.field, "message": p.message}
                for p in self.problems
            ]
        }


@record(frozen=True)
class ExportPoint:
    """A named fork branch and the commit it was exported at (``base``: the fork's pristine commit)."""

    name: str
    branch: str
    commit: str | None
    base: str | None
    line: int


@record(frozen=True)
class Row:
    """One entry of the series, in apply order: a patch file, or a directory of module files."""

    name: str
    kind: str
    what: str
    cut_against: str
    retires_when: str
    patch: str | None = None  # repo-relative POSIX path of the patch file
    files: str | None = None  # repo-relative POSIX path of a directory mirroring the tree
    upstream: str | None = None
    export_point: str | None = None
    commit: str | None = None
    skip: str | None = None  # the reason the row is kept for history but not applied
    # Must also pass `git apply --check --whitespace=error` in series order (statics/gitapply.py),
    # with the flags the series' own check passes (``git_apply: [--ignore-whitespace]``).
    git_apply: bool = False
    git_apply_flags: tuple[str, ...] = ()
    line: int = 0
    cut_note: str | None = None  # the note after cut_against's version ("adapted to #54809")
    unset: tuple[str, ...] = ()  # fields adopt filled with a default (no header line for them)
    # Kept from an adopted series file so the rendered one keeps them: the comment and blank lines
    # above the entry (each ending in a newline) and the entry's option (quilt's "-p1").
    series_comment: str | None = None
    series_options: str | None = None
    series_line_comment: str | None = None  # "  # why", after the entry (and its option)

    @property
    def is_module(self) -> bool:
        return self.files is not None

    @property
    def source_path(self) -> str:
        """The patch file or the module directory, repo-relative."""
        return self.patch if self.patch is not None else str(self.files)


@record(frozen=True)
class Retirement:
    """A row (or one hunk of it) dropped because ``pin`` carries it upstream."""

    row: str
    pin: str
    upstream: str
    reason: str
    evidence: str
    hunk: str | None = None
    line: int = 0


@record(frozen=True)
class AcceptedName:
    """A name the static checks may find removed or changed on a target release, and why that is fine."""

    name: str
    reason: str
    line: int = 0


@record(frozen=True)
class RuntimeKnob:
    """A knob a row may keep off compile_factors' key (it changes no generated code), and why."""

    name: str
    reason: str
    line: int = 0


@record(frozen=True)
class Manifest:
    """The validated manifest. ``root`` is the repository root (the parent of ``patches/``)."""

    path: Path
    root: Path
    pin: str
    package: str
    source: str
    paths: str
    export_points: tuple[ExportPoint, ...] = ()
    rows: tuple[Row, ...] = ()
    retirements: tuple[Retirement, ...] = ()
    format: int = FORMAT
    knob_prefixes: tuple[str, ...] = ()
    accepted_names: tuple[AcceptedName, ...] = ()
    runtime_knobs: tuple[RuntimeKnob, ...] = ()
    series: str = DEFAULT_SERIES  # the apply order's file, repo-relative
    # The file that must pin the package (invariant 1); None: none does for this series (another
    # build's requirements pin another release, or there is no such file).
    requirements: str | None = DEFAULT_REQUIREMENTS
    checksums: str | None = None  # a SHA256SUMS of the patch files, rendered and verified
    # An adopted series file's comment and blank lines after its last entry, written back there.
    series_tail: str | None = None

    @property
    def series_dir(self) -> str:
        """The directory the series file's entries are relative to."""
        return PurePosixPath(self.series).parent.as_posix()

    @property
    def ledger(self) -> str:
        """PATCHES.md: at the root for the default series, beside the series file otherwise (so a
        series in its own folder never writes over another series' ledger)."""
        if self.series == DEFAULT_SERIES or self.series_dir == ".":
            return "PATCHES.md"
        return f"{self.series_dir}/PATCHES.md"

    @property
    def active_rows(self) -> tuple[Row, ...]:
        """The rows that are applied, in order (skipped rows left out)."""
        return tuple(r for r in self.rows if r.skip is None)

    def row(self, name: str) -> Row | None:
        return next((r for r in self.rows if r.name == name), None)

    def point_of(self, row: Row) -> str | None:
        """The export point ``row`` is replayed on: its own, else the first (None: the manifest
        names no export point)."""
        return row.export_point or (self.export_points[0].name if self.export_points else None)

    def rows_on(self, point: str) -> tuple[Row, ...]:
        """The rows replayed on export point ``point``, in order (skipped rows left out)."""
        return tuple(r for r in self.active_rows if self.point_of(r) == point)

    def export_point(self, name: str) -> ExportPoint | None:
        return next((e for e in self.export_points if e.name == name), None)

    def to_json(self) -> dict[str, Any]:
        """The model as plain data (sorted keys when dumped): for ``--json`` output and other tools."""
        return {
            "format": self.format,
            "pin": self.pin,
            "package": self.package,
            "source": self.source,
            "paths": self.paths,
            "export_points": [
                {"name": e.name, "branch": e.branch, "commit": e.commit, "base": e.base}
                for e in self.export_points
            ],
            "rows": [
                {
                    k: getattr(r, k)
                    for k in (
                        "name",
                        "kind",
                        "what",
                        "patch",
                        "files",
                        "upstream",
                        "cut_against",
                        "retires_when",
                        "export_point",
                        "commit",
                        "skip",
                        "git_apply",
                        "git_apply_flags",
                        "cut_note",
                        "unset",
                        "series_comment",
                        "series_options",
                        "series_line_comment",
                    )
                }
                for r in self.rows
            ],
            "retirements": [
                {k: getattr(t, k) for k in ("row", "pin", "upstream", "reason", "evidence", "hunk")}
                for t in self.retirements
            ],
            "knob_prefixes": list(self.knob_prefixes),
            "accepted_names": [{"name": a.name, "reason": a.reason} for a in self.accepted_names],
            "runtime_knobs": [{"name": k.name, "reason": k.reason} for k in self.runtime_knobs],
            "series": self.series,
            "requirements": self.requirements,
            "checksums": self.checksums,
            "series_tail": self.series_tail,
        }


def default_source(package: str, pin: str) -> str:
    return f"pypi:{package}=={pin}"

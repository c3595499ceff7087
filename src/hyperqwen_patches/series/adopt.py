"""``adopt``: take over a series kept with shell scripts, in one step, without touching a patch file.

Such a project has a quilt-style series file (comments, blank lines, ``name -p1``), maybe a second
ordered list of files applied after it, module directories copied into the tree and the pin in
``docker/requirements.txt``. Each patch's preamble may carry header lines::

    Kind: fix
    What: profile memory after the warm-up
    Upstream: https://github.com/vllm-project/vllm/pull/12345
    Cut-against: 0.30.0, hand-resolved against #53110
    Retires-when: upstream merges #12345

Real preambles carry prose first (which may say ``kind: fix.`` in a sentence) and the header block
last, right before an export marker (``--- exported from 1afa72741 (row); regenerate ... ---`` or
``exported from qwen38/0.29 <sha>``) or the diff: the header block is the *last* run of consecutive
``Key: value`` lines (indented lines continue a value) before the marker or the first file header,
and everything else in the preamble is prose. Markers that name a branch become export points, so
``import`` can build the fork right after ``adopt``.

A series in its own folder (``patches/vllm-0.29/series``) beside another release's series is
adopted as that folder: the manifest's ``series`` names its file, its ``SHA256SUMS`` is kept
(``checksums``), a check script there that runs ``git apply --check`` gives every row
``git_apply: true``, and ``docker/requirements.txt`` pinning another release for another build is
recorded as such (``requirements: null``) instead of blocking ``--pin`` or being taken as the pin.

``plan_adopt`` reads all of it and returns the manifest it would write (rows in order, metadata from
the headers, the path convention detected from the patches' paths) and what ``render`` writes from
that manifest; ``write_adopt`` writes them. A field without its header line gets a default and is
listed in the row's ``unset`` (``check`` shows those rows as warnings), so nothing is invented
silently. Refused, naming file and line: a missing file, a duplicate entry, a file that is not a
patch, a header value that cannot be read, and an existing manifest (without ``force``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

from hyperqwen_patches.atomicfile import write_atomic
from hyperqwen_patches.engine.patchmodel import Patch, PatchParseError
from hyperqwen_patches.engine.patchscan import parse_patch
from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.inputfile import read_input
from hyperqwen_patches.records import field, record, replace
from hyperqwen_patches.series import gitapplyflags
from hyperqwen_patches.series.knobcomments import declared_in_patch
from hyperqwen_patches.series.manifest import parse_manifest
from hyperqwen_patches.series.manifestmodel import (
    CUT_RE,
    DEFAULT_REQUIREMENTS,
    DEFAULT_SERIES,
    KINDS,
    MANIFEST_RELPATH,
    NAME_RE,
    PACKAGE_RE,
    PATCH_SUFFIXES,
    VERSION_RE,
)
from hyperqwen_patches.series.render import SERIES_HEAD, SERIES_HEAD_LINES
from hyperqwen_patches.series.reporoot import inside_repo
from hyperqwen_patches.series.requirements import REQUIREMENTS, package_pins
from hyperqwen_patches.series.yamlwriting import yaml_scalar

# Header line -> manifest field, in the order the manifest writes them.
HEADERS = {
    "kind": "kind",
    "what": "what",
    "upstream": "upstream",
    "cut-against": "cut_against",
    "retires-when": "retires_when",
}
_HEADER_RE = re.compile(r"^(?P<key>[A-Za-z][A-Za-z-]*):[ \t]*(?P<value>.*?)\s*$")
# An export marker: "--- exported from <what> ---" (a row's generator) or "exported from <what>".
_MARKER_RE = re.compile(r"^(?:-{3}\s+)?exported from\s+(?P<what>\S.*?)(?:\s+-{3})?\s*$", re.I)
_HEX_RE = re.compile(r"^[0-9a-f]{7,64}$")
# A git branch name as a marker writes it (a conservative subset of git check-ref-format).
_BRANCH_RE = re.compile(r"^(?!.*\.\.)(?!.*//)(?!/)[A-Za-z0-9][A-Za-z0-9._/-]*(?<![/.])$")
# What makes a file a patch rather than a list of patch files: a git diff header, or a ---/+++ pair.
_PATCH_HEAD_RE = re.compile(rb"^diff --git |^--- \S.*\r?\n\+\+\+ \S", re.M)
# The comment render writes in a series file for a module or skipped row (series/render.py).
# A comment after an entry on its line, with the white space before it (kept as written).
_LINE_COMMENT = re.compile(r"[ \t]+#.*$")
_RENDERED_ROW = re.compile(r"^# (files|skipped): \S+ \(row [a-z0-9][a-z0-9._-]*: ")
_CHECKSUM_NAMES = ("SHA256SUMS", "sha256sums", "SHA256SUMS.txt")
_GIT_APPLY_CHECK_RE = re.compile(r"\bgit\s+apply\b[^\n]*--check\b")
_SUBJECT_PREFIX = re.compile(r"^\s*(\[[^\]]*\]\s*)+")
_NONE_WORDS = {"", "none", "null", "-", "n/a"}


class AdoptError(UsageError):
    """A series that cannot be adopted as it is; the message names the file and line."""


@record(frozen=True)
class AdoptedRow:
    """One row as adopt writes it, and where it came from (``origin``: list file and line)."""

    name: str
    kind: str
    what: str
    cut_against: str
    retires_when: str
    origin: str
    patch: str | None = None
    files: str | None = None
    upstream: str | None = None
    unset: tuple[str, ...] = ()
    export_point: str | None = None
    git_apply: bool = False
    series_comment: str | None = None
    series_options: str | None = None
    series_line_comment: str | None = None

    def fields(self) -> list[tuple[str, str | None]]:
        """The manifest keys in docs/manifest.md's order (``None``: written as ``null``)."""
        out: list[tuple[str, str | None]] = [("name", self.name)]
        out.append(("patch", self.patch) if self.patch is not None else ("files", self.files))
        out += [("kind", self.kind), ("what", self.what)]
        if self.kind == "backport" or self.upstream is not None:
            out.append(("upstream", self.upstream))
        out += [("cut_against", self.cut_against), ("retires_when", self.retires_when)]
        if self.export_point is not None:
            out.append(("export_point", self.export_point))
        return out


@record
class AdoptPlan:
    root: Path
    package: str
    pin: str
    pin_from: str  # "--pin" or "docker/requirements.txt:N"
    paths: str  # "root" | "package"
    source: str | None
    rows: list[AdoptedRow]
    runtime_knobs: tuple[tuple[str, str], ...] = ()  # (knob, reason)
    files: dict[str, bytes] = field(default_factory=dict)  # repo-relative path -> bytes to write
    replaced: list[str] = field(default_factory=list)  # existing files the plan overwrites
    # (name, branch, origin "file:line"): from the files' exported-from markers, else one after the pin
    export_points: tuple[tuple[str, str, str], ...] = ()
    series: str = "patches/series"  # where render writes the apply order
    requirements: str | None = "docker/requirements.txt"  # None: it pins another build's release
    checksums: str | None = None
    git_apply_from: str | None = None  # "script:line" that runs git apply --check
    # The flags that line passes which a row may state (gitapplyflags), and those it may not.
    git_apply_flags: tuple[str, ...] = ()
    git_apply_unstated: tuple[str, ...] = ()
    series_tail: str | None = None  # the series file's comments after its last entry

    def to_json(self) -> dict[str, object]:
        return {
            "root": str(self.root),
            "package": self.package,
            "pin": self.pin,
            "pin_from": self.pin_from,
            "paths": self.paths,
            "source": self.source,
            "rows": [
                {k: v for k, v in row.fields()} | {"origin": row.origin, "unset": list(row.unset)}
                for row in self.rows
            ],
            "runtime_knobs": [{"name": k, "reason": r} for k, r in self.runtime_knobs],
            "export_points": [
                {"name": n, "branch": b, "origin": o} for n, b, o in self.export_points
            ],
            "series": self.series,
            "requirements": self.requirements,
            "checksums": self.checksums,
            "git_apply_from": self.git_apply_from,
            "git_apply_flags": list(self.git_apply_flags),
            "git_apply_unstated": list(self.git_apply_unstated),
            "writes": sorted(self.files),
            "replaces": sorted(self.replaced),
        }


def plan_adopt(
    root: Path,
    series_file: Path,
    *,
    pin: str | None = None,
    appends: tuple[Path, ...] = (),
    modules: tuple[Path, ...] = (),
    package: str = "vllm",
    source: str | None = None,
    runtime_knobs: tuple[tuple[str, str], ...] = (),
    force: bool = False,
) -> AdoptPlan:
    """Read the series and everything it names; return what adopt would write (nothing is written)."""
    root = root.resolve()
    if not PACKAGE_RE.match(package):
        raise AdoptError(f"--package {package!r} is not a package name")
    inside_repo(root, "patches")  # what adopt writes (manifest, series, ledger) stays in the repo
    manifest_path = root / MANIFEST_RELPATH
    if manifest_path.exists() and not force:
        raise AdoptError(
            f"{MANIFEST_RELPATH} exists already in {root}: this repository has a manifest",
            hint="pass --force to replace it (the old one is in your version control)",
        )
    series_rel = _rel(root, series_file)
    if series_rel.startswith("/") or series_rel.startswith("../"):
        raise AdoptError(
            f"{series_file} lies outside the repository {root}",
            hint="adopt a series inside the repository (--into names it)",
        )
    entries: list[_Entry] = []
    seen: dict[Path, str] = {}
    found, series_tail = _list_entries(root, series_file)
    for i, list_file in enumerate((series_file, *appends)):
        if i > 0:
            found = _append_entries(root, list_file)
        for entry in found:
            if entry.path in seen:
                raise AdoptError(
                    f"{entry.origin}: {_rel(root, entry.path)} is listed twice "
                    f"(first at {seen[entry.path]})",
                    hint=_listed_twice_hint(series_file, series_rel, i > 0),
                )
            seen[entry.path] = entry.origin
            entries.append(replace(entry, in_series=i == 0))
    if not entries and not modules:
        raise AdoptError(f"{series_rel}: names no patch file")

    taken: set[str] = set()
    rows: list[AdoptedRow] = []
    markers: list[tuple[str | None, str]] = []  # per row: (branch, origin) from its marker
    conventions: dict[str, list[str]] = {"root": [], "package": []}
    knobs: dict[str, str] = dict(runtime_knobs)
    envs_paths = (f"{package}/envs.py".encode(), b"envs.py")
    parsed_rows: list[tuple[_Entry, str, dict[str, tuple[str, int]], str | None]] = []
    for entry in entries:
        rel = _rel(root, entry.path)
        parsed = _read_patch(entry.path, rel, entry.origin)
        for fp in parsed.files:
            where = fp.new_path if fp.new_path is not None else fp.old_path
            assert where is not None
            top = where.split(b"/", 1)[0]
            conventions["root" if top == package.encode() else "package"].append(rel)
        headers, subject, marker = _headers(parsed.preamble, rel)
        markers.append(marker)
        parsed_rows.append((entry, rel, headers, subject))
        for knob, reason, _line in declared_in_patch(parsed, envs_paths):
            knobs.setdefault(knob, reason)
    pin, pin_from, requirements = _pin(root, package, pin, series_rel, parsed_rows)
    checksums = _checksums(root, series_file)
    git_apply_from, git_apply_line = _git_apply_script(root, series_file)
    git_apply_flags, git_apply_unstated = gitapplyflags.flags_in_command(git_apply_line)
    points, point_of = _export_points(markers, package, pin)
    for i, (entry, rel, headers, subject) in enumerate(parsed_rows):
        row = _row(rel, entry.origin, headers, subject, pin, _name(entry.path, taken))
        rows.append(
            replace(
                row,
                export_point=point_of[i] if len(points) > 1 else None,
                git_apply=git_apply_from is not None and entry.in_series,
                series_comment=entry.comment,
                series_options=entry.option,
                series_line_comment=entry.line_comment,
            )
        )
    paths = _convention(conventions)
    for directory in modules:
        rows.append(_module_row(root, directory, package, paths, pin, _name(directory, taken)))
    plan = AdoptPlan(
        root,
        package,
        pin,
        pin_from,
        paths,
        source,
        rows,
        tuple(knobs.items()),
        export_points=tuple(points),
        series=series_rel,
        requirements=requirements,
        checksums=checksums,
        git_apply_from=git_apply_from,
        git_apply_flags=git_apply_flags,
        git_apply_unstated=git_apply_unstated,
        series_tail=series_tail,
    )
    text = manifest_text(plan).encode("utf-8")
    # Validated as check will read it: adopt never writes a manifest the tool then refuses.
    manifest = parse_manifest(text, path=manifest_path, root=root)
    from hyperqwen_patches.series.render import render

    plan.files = {MANIFEST_RELPATH: text, **render(manifest)}
    # Replaced: an existing file whose bytes change (a SHA256SUMS render writes as it was is kept).
    plan.replaced = [p for p, data in plan.files.items() if _differs(root / p, data)]
    return plan


def _differs(path: Path, data: bytes) -> bool:
    try:
        return path.read_bytes() != data
    except FileNotFoundError:
        return False


def write_adopt(plan: AdoptPlan) -> list[str]:
    """Write the manifest and the rendered files, each atomically; patch files are never written.
    Returns what was written: a file already holding the same bytes is left as it is."""
    written: list[str] = []
    for rel, data in plan.files.items():
        if (plan.root / rel).exists() and not _differs(plan.root / rel, data):
            continue  # the same bytes (a SHA256SUMS as the project keeps it): time stamp kept
        write_atomic(plan.root / rel, data)
        written.append(rel)
    return sorted(written)


def manifest_text(plan: AdoptPlan) -> str:
    # No `$schema` line: the published schema has no address an adopted repository can reach, and
    # a line that points nowhere makes editors complain (manifest.schema.json ships in the package).
    lines = [
        "# Written by `hyperqwen-patches adopt`; keys are described in docs/manifest.md. Rows listing",
        "# `unset` fields had no header line for them: fill them in and drop the `unset` line.",
        "format: 1",
        f"pin: {yaml_scalar(plan.pin, quoted=True)}",
        f"package: {plan.package}",
    ]
    if plan.source is not None:
        lines.append(f"source: {yaml_scalar(plan.source)}")
    lines.append(f"paths: {plan.paths}")
    if plan.series != DEFAULT_SERIES:
        lines.append(f"series: {yaml_scalar(plan.series)}")
    if plan.requirements is None:
        lines += [
            f"# {REQUIREMENTS} does not state this series' pin (another build's, or none).",
            "requirements: null",
        ]
    if plan.checksums is not None:
        lines.append(f"checksums: {yaml_scalar(plan.checksums)}")
    if plan.series_tail is not None:
        lines.append(f"series_tail: {yaml_scalar(plan.series_tail)}")
    lines.append("export_points:")
    for name, branch, origin in plan.export_points:
        lines += [
            f"  # from {origin}",
            f"  - name: {yaml_scalar(name)}",
            f"    branch: {yaml_scalar(branch)}",
        ]
    lines.append("rows:")
    for row in plan.rows:
        for i, (key, value) in enumerate(row.fields()):
            dash = "  - " if i == 0 else "    "
            shown = "null" if value is None else _yaml_value(key, value)
            lines.append(f"{dash}{key}: {shown}")
        if row.git_apply:
            lines.append(f"    git_apply: {_git_apply_value(plan)}")
        if row.series_comment is not None:
            lines.append(f"    series_comment: {yaml_scalar(row.series_comment)}")
        if row.series_options is not None:
            lines.append(f"    series_options: {yaml_scalar(row.series_options)}")
        if row.series_line_comment is not None:
            lines.append(f"    series_line_comment: {yaml_scalar(row.series_line_comment)}")
        if row.unset:
            lines.append(f"    unset: [{', '.join(row.unset)}]")
    lines.append("retirements: []")
    if plan.runtime_knobs:
        lines.append("runtime_knobs:")
        for knob, reason in plan.runtime_knobs:
            lines += [f"  - name: {knob}", f"    reason: {yaml_scalar(reason)}"]
    return "\n".join(lines) + "\n"


def _yaml_value(key: str, value: str) -> str:
    # Versions are always quoted (an unquoted 0.30 is a number); text as the export writes it.
    return yaml_scalar(value, quoted=key == "cut_against")


# --- reading the inputs ------------------------------------------------------------------------------


@record(frozen=True)
class _Entry:
    """A patch file named by a list (or given to --append itself), with what its line carried."""

    path: Path
    origin: str  # "list-file:line" or "--append FILE"
    comment: str | None = None  # the comment and blank lines above it in the series file
    option: str | None = None  # "-p1" when the line said so
    line_comment: str | None = None  # "  # why" after the name (and option) on its line
    in_series: bool = True  # named by SERIES_FILE (not by an --append)


def _rel(root: Path, path: Path) -> str:
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _read_patch(path: Path, rel: str, origin: str) -> Patch:
    try:
        data = read_input(path, "patch file", pipes=False)
    except ValueError as exc:
        raise AdoptError(f"{origin}: {exc}") from None
    except OSError as exc:
        raise AdoptError(f"{origin}: cannot read {rel}: {exc.strerror}") from None
    try:
        parsed = parse_patch(data, name=rel)
    except PatchParseError as exc:
        raise AdoptError(f"{origin}: {rel} is not a patch GNU patch would apply: {exc}") from None
    if not parsed.files:
        raise AdoptError(f"{origin}: {rel} holds no file changes (not a patch)")
    return parsed


def _pin(
    root: Path,
    package: str,
    given: str | None,
    series_rel: str,
    parsed_rows: list[tuple[_Entry, str, dict[str, tuple[str, int]], str | None]],
) -> tuple[str, str, str | None]:
    """(pin, where it came from, the requirements file that states it or None).

    ``--pin`` wins. A series in its own folder (``patches/vllm-0.29/series``) may sit in a
    repository whose ``docker/requirements.txt`` pins another release for another build: then that
    file is recorded as not this series' (``requirements: null``) instead of refusing ``--pin``, and
    without ``--pin`` the pin comes from the series (its rows' ``Cut-against:`` versions, narrowed by
    the folder's version), never from the other build's line. For the repository's own
    ``patches/series`` the file is the pin's one statement, so a disagreement is refused."""
    req = root / REQUIREMENTS
    found: list[tuple[int, str]] = []
    if req.is_file():
        found = [(n, spec) for n, spec in package_pins(req.read_text("utf-8"), package)]
    exact = [(n, spec[2:]) for n, spec in found if spec.startswith("==") and "," not in spec]
    own_folder = series_rel != DEFAULT_SERIES
    folder = PurePosixPath(series_rel).parent.name
    hint_match = re.search(r"(\d+(?:\.\d+)+)", folder) if own_folder else None
    hint = hint_match[1] if hint_match else None

    def fits(version: str) -> bool:
        return hint is None or version == hint or version.startswith(hint + ".")

    def statement(pin: str) -> str | None:
        """The requirements file as the pin's statement, or None where it states another."""
        if not req.is_file():
            return DEFAULT_REQUIREMENTS  # absent: check says "not present" and compares nothing
        if found and all(v == pin for _, v in exact) and len(exact) == len(found):
            return DEFAULT_REQUIREMENTS
        return None  # silent about the package, or another build's release

    if given is not None:
        if not VERSION_RE.match(given):
            raise AdoptError(f"--pin {given!r} is not a release version such as 0.31.0")
        for n, version in exact:
            if version != given and not own_folder:
                raise AdoptError(
                    f"{REQUIREMENTS}:{n}: pins {package}=={version}, not --pin {given}",
                    hint="the pin is stated once: fix one of them (check's invariant 1 compares "
                    "them); a series kept in its own folder may sit beside another build's pin",
                )
        return given, "--pin", statement(given)
    if len(exact) == 1 and VERSION_RE.match(exact[0][1]) and fits(exact[0][1]):
        n, version = exact[0]
        return version, f"{REQUIREMENTS}:{n}", DEFAULT_REQUIREMENTS
    cuts: dict[str, str] = {}
    for _entry, rel, headers, _subject in parsed_rows:
        if "cut_against" in headers:
            m = CUT_RE.match(headers["cut_against"][0])
            if m is not None and fits(m["version"]):
                cuts.setdefault(m["version"], f"{rel}:{headers['cut_against'][1]}")
    if len(cuts) == 1 and (own_folder or not found):
        version, where = next(iter(cuts.items()))
        return version, f"the rows' Cut-against: ({where})", statement(version)
    if found:
        what = ", ".join(f"line {n}: {package}{spec}" for n, spec in found)
        raise AdoptError(
            f"{REQUIREMENTS} ({what}) does not give this series' pin"
            + (f" (its folder names {hint})" if hint else ""),
            hint="pass --pin VERSION",
        )
    raise AdoptError(
        f"no --pin, no {REQUIREMENTS} naming {package}, and the rows' Cut-against: headers "
        f"name {len(cuts)} versions",
        hint="pass --pin VERSION",
    )


def _checksums(root: Path, series_file: Path) -> str | None:
    """The series folder's checksum file, verified as ``sha256sum -c`` would: adopting a series
    whose sums already disagree would rewrite them and hide it, so that is refused by file and line."""
    import hashlib

    folder = series_file.resolve().parent
    for name in _CHECKSUM_NAMES:
        file = folder / name
        if not file.is_file():
            continue
        rel = _rel(root, file)
        try:
            text = file.read_text("utf-8")
        except UnicodeDecodeError as exc:
            raise AdoptError(f"{rel}: not UTF-8 text (byte {exc.start})") from None
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.startswith("#"):
                continue
            m = re.fullmatch(r"([0-9a-fA-F]{64}) [ *](.+)", line)
            if m is None:
                raise AdoptError(f"{rel}:{number}: not a sha256sum line: {line!r}")
            target = folder / m[2]
            try:
                actual = hashlib.sha256(target.read_bytes()).hexdigest()
            except OSError:
                raise AdoptError(f"{rel}:{number}: {m[2]}: no such file") from None
            if actual != m[1].lower():
                raise AdoptError(
                    f"{rel}:{number}: {m[2]}: its sha256 is {actual[:12]}…, the file says "
                    f"{m[1][:12]}…",
                    hint="the series' own sha256sum -c fails too: fix the file or its sum first",
                )
        return rel
    return None


def _listed_twice_hint(series_file: Path, series_rel: str, appended: bool) -> str | None:
    """Re-adopting with the same --append: the rendered series file lists those files already."""
    try:
        with open(series_file, "rb") as fh:
            rendered = fh.readline().rstrip(b"\n") == SERIES_HEAD.encode()
    except OSError:
        return None
    if appended and rendered:
        return (
            f"{series_rel} was written by render and lists the appended files already: "
            "re-adopt it without --append"
        )
    return None


def _git_apply_value(plan: AdoptPlan) -> str:
    """A row's ``git_apply`` as adopt writes it: ``true``, or the flags the series' own check
    passes (``[--ignore-whitespace]``), with the script line it comes from."""
    if not plan.git_apply_flags:
        return f"true  # {plan.git_apply_from} runs git apply --check"
    flags = ", ".join(yaml_scalar(f) for f in plan.git_apply_flags)
    return f"[{flags}]  # {plan.git_apply_from} runs git apply --check with them"


def _git_apply_script(root: Path, series_file: Path) -> tuple[str | None, str]:
    """``file:line`` of a script in the series' folder that runs ``git apply --check`` (the series'
    own check), and that line: its rows then keep that guarantee as ``git_apply: true`` (or the
    flags the line passes, series/gitapplyflags.py)."""
    folder = series_file.resolve().parent
    for file in sorted(folder.iterdir()):
        if not file.is_file() or file.suffix in PATCH_SUFFIXES or file == series_file.resolve():
            continue
        try:
            if file.stat().st_size > 1 << 20:
                continue
            text = file.read_text("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if not line.lstrip().startswith("#") and _GIT_APPLY_CHECK_RE.search(line):
                return f"{_rel(root, file)}:{number}", line
    return None, ""


def _export_points(
    markers: list[tuple[str | None, str]], package: str, pin: str
) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Export points from the rows' markers, and each row's point.

    No marker names a branch: one point named after the pin. One branch named: one point for the
    whole series (a row without a marker is still part of it). Several branches: one point per
    branch, in order of first appearance; each export point is a branch of its own (docs/fork.md),
    and a row without a branch belongs with the row before it, as the series carries it."""
    fallback = f"{package}-{pin}".lower()
    branches = list(dict.fromkeys(b for b, _ in markers if b is not None))
    origins = {b: o for b, o in reversed(markers) if b is not None}
    if not branches:
        point = (fallback, fallback, "none named: after the pin")
        return [point], [fallback] * len(markers)
    points: list[tuple[str, str, str]] = []
    name_of: dict[str, str] = {}
    for branch in branches:
        name = re.sub(r"[^a-z0-9._-]+", "-", branch.lower()).strip("-._")[:100] or "fork"
        base, n = name, 2
        while name in name_of.values():
            name, n = f"{base}-{n}", n + 1
        name_of[branch] = name
        points.append((name, branch, origins[branch]))
    point_of: list[str] = []
    current = name_of[branches[0]]
    for marked, _ in markers:
        if marked is not None:
            current = name_of[marked]
        point_of.append(current)
    return points, point_of


def _marker_branch(what: str) -> str | None:
    """The branch an ``exported from`` marker names: ``qwen38/0.29 <sha>``, ``fork@<sha>``; a bare
    commit (``1afa72741 (row); regenerate ...``) names none."""
    first = what.split()[0].rstrip(";,:")
    if _HEX_RE.match(first):
        return None
    if "@" in first:
        first = first.split("@", 1)[0]
    return first if _BRANCH_RE.match(first) else None


def _list_entries(root: Path, list_file: Path) -> tuple[list[_Entry], str | None]:
    """quilt's series format: one patch per line, ``#`` comments, blank lines, an optional ``-p1``.
    Whole-line comments and blank lines are kept with the entry below them, a comment after a name
    on its line with that entry, and those after the last entry as the file's tail (returned with
    the entries): the rendered series writes them all back where they were."""
    shown = _rel(root, list_file)
    try:
        # pipes=False: a FIFO in a repository has no writer; opening it would wait forever
        text = read_input(list_file, "series file", pipes=False).decode("utf-8")
    except ValueError as exc:
        raise AdoptError(str(exc)) from None
    except FileNotFoundError:
        raise AdoptError(f"{shown} does not exist") from None
    except IsADirectoryError:
        raise AdoptError(f"{shown} is a directory, not a series file") from None
    except UnicodeDecodeError as exc:
        raise AdoptError(f"{shown}: not UTF-8 text (byte {exc.start})") from None
    out: list[_Entry] = []
    base = list_file.parent
    pending: list[str] = []  # comment and blank lines waiting for their entry
    lines = text.splitlines()
    # A file render wrote (re-adopting with --force): its own header and row comments are render's,
    # written again from the manifest, so keeping them would repeat them on every re-adopt.
    rendered = bool(lines) and lines[0] == SERIES_HEAD
    for number, raw in enumerate(lines, 1):
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not line:
            kept = raw.strip()
            if rendered and (number <= SERIES_HEAD_LINES or _RENDERED_ROW.match(kept)):
                continue
            pending.append(kept if kept.startswith("#") else "")
            continue
        origin = f"{shown}:{number}"
        if "\0" in line:
            raise AdoptError(f"{origin}: a NUL byte in the line (no file name holds one)")
        name, *options = line.split()
        for option in options:
            if option != "-p1":
                raise AdoptError(
                    f"{origin}: option {option!r}: the tool applies every patch with -p1",
                    hint="re-cut the patch with a/ and b/ prefixes, or drop the option if it is -p1",
                )
        path = (base / name).resolve()
        try:
            path.relative_to(root)
        except ValueError:
            raise AdoptError(
                f"{origin}: {name} lies outside the repository {root}",
                hint="adopt a series whose files are inside the repository (--into names it)",
            ) from None
        if not path.is_file():
            what = "is not a file" if path.exists() else "does not exist"
            raise AdoptError(f"{origin}: {_rel(root, path)} {what}")
        comment = "".join(f"{c}\n" for c in pending) or None
        trailing = _LINE_COMMENT.search(raw)
        line_comment = trailing[0] if trailing else None
        out.append(_Entry(path, origin, comment, "-p1" if options else None, line_comment))
        pending = []
    return out, "".join(f"{c}\n" for c in pending) or None


def _append_entries(root: Path, given: Path) -> list[_Entry]:
    """``--append FILE``: a list of patch files, or a patch file itself (one row). A patch is told by
    its content (a ``diff --git`` line, or a ``---`` line followed by ``+++``), not by its name: the
    files of a bash array are often named ``*.patch`` and lists ``*.txt``, but not always."""
    rel = _rel(root, given)
    try:
        path = given.resolve()
        head = path.read_bytes() if path.is_file() else b""
    except OSError:
        head = b""
    if head and _PATCH_HEAD_RE.search(head):
        try:
            path.relative_to(root)
        except ValueError:
            raise AdoptError(
                f"--append {given}: lies outside the repository {root}",
                hint="adopt a series whose files are inside the repository (--into names it)",
            ) from None
        return [_Entry(path, f"--append {rel}", in_series=False)]
    return [_Entry(e.path, e.origin, in_series=False) for e in _list_entries(root, given)[0]]


def _headers(
    preamble: bytes, rel: str
) -> tuple[dict[str, tuple[str, int]], str | None, tuple[str | None, str]]:
    """The header block's fields (field -> (value, line)), the Subject, and the export marker
    ((branch or None, "file:line"); ``(None, "")`` without one).

    The header block is the last run of ``Key: value`` lines (indented lines continue a value)
    holding one of the known keys and standing as a paragraph of its own (blank lines, the
    preamble's edges or a ``---``/marker line around it), or ending right before the marker (or,
    without one, the diff). Prose anywhere else is ignored, even a sentence that starts ``kind: fix.``."""
    subject: str | None = None
    lines = preamble.decode("utf-8", errors="backslashreplace").splitlines()
    for number, line in enumerate(lines, 1):
        m = _HEADER_RE.match(line)
        if m is not None and m["key"].lower() == "subject":
            subject = m["value"]
            for more in lines[number:]:  # an RFC 822 folded Subject continues on indented lines
                if not more[:1].isspace() or not more.strip():
                    break
                subject += " " + more.strip()
            subject = _SUBJECT_PREFIX.sub("", subject).strip() or None
            break
    end = len(lines)
    marker: tuple[str | None, str] = (None, "")
    for i, line in enumerate(lines):
        m = _MARKER_RE.match(line.strip())
        if m is not None:
            end, marker = i, (_marker_branch(m["what"]), f"{rel}:{i + 1}")
            break

    def edge(i: int) -> bool:  # what may stand around a header block
        return i < 0 or i >= end or not lines[i].strip() or lines[i].strip().startswith("---")

    def at_end(j: int) -> bool:  # only blank and --- lines between line j and the marker or diff
        return all(edge(k) for k in range(j, end))

    # Runs of Key: value lines (indented lines continue the value above); a run is a header block
    # when it stands as a paragraph of its own, or ends right before the marker (or the diff).
    blocks: list[list[tuple[int, str, str]]] = []  # [(line, key, value)]
    i = 0
    while i < end:
        if _HEADER_RE.match(lines[i]) is None:
            i += 1
            continue
        block: list[tuple[int, str, str]] = []
        j = i
        while j < end:
            m = _HEADER_RE.match(lines[j])
            if m is not None:
                block.append((j + 1, m["key"], m["value"]))
            elif lines[j][:1].isspace() and lines[j].strip():
                number, key, value = block[-1]
                block[-1] = (number, key, f"{value} {lines[j].strip()}".strip())
            else:
                break
            j += 1
        standalone = edge(i - 1) and edge(j)
        if (standalone or at_end(j)) and any(key.lower() in HEADERS for _, key, _ in block):
            blocks.append(block)
        i = j
    headers: dict[str, tuple[str, int]] = {}
    for number, key, value in blocks[-1] if blocks else []:
        if key.lower() not in HEADERS:
            continue
        field_name = HEADERS[key.lower()]
        if field_name in headers:
            raise AdoptError(
                f"{rel}:{number}: a second {key}: line in the header block (first on line "
                f"{headers[field_name][1]})"
            )
        headers[field_name] = (value, number)
    return headers, subject, marker


def _row(
    rel: str,
    origin: str,
    headers: dict[str, tuple[str, int]],
    subject: str | None,
    pin: str,
    name: str,
) -> AdoptedRow:
    unset: list[str] = []

    def take(field_name: str, default: str) -> str:
        value = headers.get(field_name, ("", 0))[0]
        if value.lower() in _NONE_WORDS:
            unset.append(field_name)
            return default
        return value

    kind = take("kind", "local").lower()
    if kind not in KINDS:
        _, line = headers["kind"]
        raise AdoptError(
            f"{rel}:{line}: Kind: {kind!r} is not one of {', '.join(KINDS)}",
            hint="fix the header line (the patch's preamble is not part of what applies)",
        )
    what = take("what", subject or f"(no What: header in {rel})")
    cut = take("cut_against", pin)
    if CUT_RE.match(cut) is None:
        _, line = headers["cut_against"]
        raise AdoptError(
            f"{rel}:{line}: Cut-against: {cut!r} does not start with a release version",
            hint="write it as VERSION or VERSION: note (0.31.0: adapted to #54809)",
        )
    retires = take("retires_when", "not stated (no Retires-when: header)")
    upstream: str | None = headers.get("upstream", ("", 0))[0]
    if upstream is not None and upstream.lower() in _NONE_WORDS:
        upstream = None
    if kind == "backport" and upstream is None:
        upstream = "unknown (no Upstream: header)"
        unset.append("upstream")
    order = ("kind", "what", "upstream", "cut_against", "retires_when")
    return AdoptedRow(
        name=name,
        kind=kind,
        what=what,
        cut_against=cut,
        retires_when=retires,
        origin=origin,
        patch=rel,
        upstream=upstream,
        unset=tuple(f for f in order if f in unset),
    )


def _module_row(
    root: Path, directory: Path, package: str, paths: str, pin: str, name: str
) -> AdoptedRow:
    shown = _rel(root, directory)
    if not directory.is_dir():
        raise AdoptError(f"--modules {shown}: not a directory")
    try:
        directory.resolve().relative_to(root)
    except ValueError:
        raise AdoptError(f"--modules {shown}: lies outside the repository {root}") from None
    holds_package = (directory / package).is_dir()
    if paths == "package" and holds_package:
        raise AdoptError(
            f"--modules {shown}: holds {package}/, but the series' paths are package-relative",
            hint=f"give the directory inside it ({shown}/{package}), which mirrors the package",
        )
    if paths == "root" and not holds_package:
        raise AdoptError(
            f"--modules {shown}: the series' paths start with {package}/, so a module directory "
            f"must mirror the tree ({shown}/{package}/...)",
        )
    if not any(files for _, _, files in os.walk(directory)):
        raise AdoptError(f"--modules {shown}: holds no files")
    return AdoptedRow(
        name=name,
        kind="own",
        what=f"Module files copied into the tree from {shown}/",
        cut_against=pin,
        retires_when="not stated (a module directory has no header lines)",
        origin=f"--modules {shown}",
        files=shown,
        unset=("what", "retires_when"),
    )


def _name(path: Path, taken: set[str]) -> str:
    """A row name from a file name: ``0007-Fix_The-Thing.patch`` -> ``fix-the-thing``."""
    stem = PurePosixPath(path.name).stem if path.suffix in (".patch", ".diff") else path.name
    if path.is_dir():
        stem = f"{path.parent.name}-{path.name}" if path.name in ("files", "modules") else path.name
    stem = re.sub(r"^\d+[-_.]+", "", stem).lower()
    stem = re.sub(r"[^a-z0-9._-]+", "-", stem).strip("-._") or "row"
    if not NAME_RE.match(stem):
        stem = f"row-{stem}"
    name, n = stem, 2
    while name in taken:
        name, n = f"{stem}-{n}", n + 1
    taken.add(name)
    return name


def _convention(found: dict[str, list[str]]) -> str:
    if found["root"] and found["package"]:
        raise AdoptError(
            "the patches mix two path conventions: "
            f"{found['root'][0]} names paths under the package's parent directory, "
            f"{found['package'][0]} paths inside the package",
            hint="one series uses one convention (docs/manifest.md, 'Path conventions')",
        )
    return "root" if found["root"] else "package"

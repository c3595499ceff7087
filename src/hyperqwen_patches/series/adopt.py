"""``adopt``: take over a series kept with shell scripts, in one step, without touching a patch file.

Such a project has a quilt-style series file (comments, blank lines, ``name -p1``), maybe a second
ordered list of files applied after it, module directories copied into the tree and the pin in
``docker/requirements.txt``. Each patch's preamble may carry header lines::

    Kind: fix
    What: profile memory after the warm-up
    Upstream: https://github.com/vllm-project/vllm/pull/12345
    Cut-against: 0.30.0, hand-resolved against #53110
    Retires-when: upstream merges #12345

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
from hyperqwen_patches.engine.patchset import PatchParseError, parse_patch
from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.inputfile import read_input
from hyperqwen_patches.records import field, record
from hyperqwen_patches.series.manifest import (
    CUT_RE,
    KINDS,
    MANIFEST_RELPATH,
    NAME_RE,
    PACKAGE_RE,
    VERSION_RE,
    inside_repo,
    parse_manifest,
    yaml_scalar,
)
from hyperqwen_patches.series.requirements import REQUIREMENTS, package_pins

# Header line -> manifest field, in the order the manifest writes them.
HEADERS = {
    "kind": "kind",
    "what": "what",
    "upstream": "upstream",
    "cut-against": "cut_against",
    "retires-when": "retires_when",
}
_HEADER_RE = re.compile(r"^(?P<key>[A-Za-z][A-Za-z-]*):[ \t]*(?P<value>.*?)\s*$")
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

    def fields(self) -> list[tuple[str, str | None]]:
        """The manifest keys in docs/manifest.md's order (``None``: written as ``null``)."""
        out: list[tuple[str, str | None]] = [("name", self.name)]
        out.append(("patch", self.patch) if self.patch is not None else ("files", self.files))
        out += [("kind", self.kind), ("what", self.what)]
        if self.kind == "backport" or self.upstream is not None:
            out.append(("upstream", self.upstream))
        out += [("cut_against", self.cut_against), ("retires_when", self.retires_when)]
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
    pin, pin_from = _pin(root, package, pin)
    entries: list[tuple[Path, str]] = []  # (patch file, origin)
    seen: dict[Path, str] = {}
    for list_file in (series_file, *appends):
        for path, origin in _list_entries(root, list_file):
            if path in seen:
                raise AdoptError(
                    f"{origin}: {_rel(root, path)} is listed twice (first at {seen[path]})"
                )
            seen[path] = origin
            entries.append((path, origin))
    if not entries and not modules:
        raise AdoptError(f"{_rel(root, series_file)}: names no patch file")

    taken: set[str] = set()
    rows: list[AdoptedRow] = []
    conventions: dict[str, list[str]] = {"root": [], "package": []}
    for path, origin in entries:
        rel = _rel(root, path)
        try:
            data = read_input(path, "patch file", pipes=False)
        except ValueError as exc:
            raise AdoptError(f"{origin}: {exc}") from None
        except OSError as exc:
            raise AdoptError(f"{origin}: cannot read {rel}: {exc.strerror}") from None
        try:
            parsed = parse_patch(data, name=rel)
        except PatchParseError as exc:
            raise AdoptError(
                f"{origin}: {rel} is not a patch GNU patch would apply: {exc}"
            ) from None
        if not parsed.files:
            raise AdoptError(f"{origin}: {rel} holds no file changes (not a patch)")
        for fp in parsed.files:
            where = fp.new_path if fp.new_path is not None else fp.old_path
            assert where is not None
            top = where.split(b"/", 1)[0]
            conventions["root" if top == package.encode() else "package"].append(rel)
        headers, subject = _headers(parsed.preamble, rel)
        rows.append(_row(rel, origin, headers, subject, pin, _name(path, taken)))
    paths = _convention(conventions)
    for directory in modules:
        rows.append(_module_row(root, directory, package, paths, pin, _name(directory, taken)))
    plan = AdoptPlan(root, package, pin, pin_from, paths, source, rows, runtime_knobs)
    text = manifest_text(plan).encode("utf-8")
    # Validated as check will read it: adopt never writes a manifest the tool then refuses.
    manifest = parse_manifest(text, path=manifest_path, root=root)
    from hyperqwen_patches.series.render import render

    plan.files = {MANIFEST_RELPATH: text, **render(manifest)}
    plan.replaced = [p for p in plan.files if (root / p).exists()]
    return plan


def write_adopt(plan: AdoptPlan) -> list[str]:
    """Write the manifest and the rendered files, each atomically; patch files are never written."""
    for rel, data in plan.files.items():
        write_atomic(plan.root / rel, data)
    return sorted(plan.files)


def manifest_text(plan: AdoptPlan) -> str:
    lines = [
        "# yaml-language-server: $schema=https://hyperqwen-patches.invalid/manifest.schema.json",
        "#",
        "# Written by `hyperqwen-patches adopt`; keys are described in docs/manifest.md. Rows listing",
        "# `unset` fields had no header line for them: fill them in and drop the `unset` line.",
        "format: 1",
        f"pin: {yaml_scalar_quoted(plan.pin)}",
        f"package: {plan.package}",
    ]
    if plan.source is not None:
        lines.append(f"source: {yaml_scalar(plan.source)}")
    lines += [f"paths: {plan.paths}", "rows:"]
    for row in plan.rows:
        for i, (key, value) in enumerate(row.fields()):
            dash = "  - " if i == 0 else "    "
            shown = "null" if value is None else _yaml_value(key, value)
            lines.append(f"{dash}{key}: {shown}")
        if row.unset:
            lines.append(f"    unset: [{', '.join(row.unset)}]")
    lines.append("retirements: []")
    if plan.runtime_knobs:
        lines.append("runtime_knobs:")
        for knob, reason in plan.runtime_knobs:
            lines += [f"  - name: {knob}", f"    reason: {yaml_scalar(reason)}"]
    return "\n".join(lines) + "\n"


def yaml_scalar_quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _yaml_value(key: str, value: str) -> str:
    # Versions are always quoted (an unquoted 0.30 is a number); text as the export writes it.
    return yaml_scalar_quoted(value) if key == "cut_against" else yaml_scalar(value)


# --- reading the inputs ------------------------------------------------------------------------------


def _rel(root: Path, path: Path) -> str:
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _pin(root: Path, package: str, given: str | None) -> tuple[str, str]:
    req = root / REQUIREMENTS
    found: list[tuple[int, str]] = []
    if req.is_file():
        found = [(n, spec) for n, spec in package_pins(req.read_text("utf-8"), package)]
    exact = [(n, spec[2:]) for n, spec in found if spec.startswith("==") and "," not in spec]
    if given is not None:
        if not VERSION_RE.match(given):
            raise AdoptError(f"--pin {given!r} is not a release version such as 0.31.0")
        for n, version in exact:
            if version != given:
                raise AdoptError(
                    f"{REQUIREMENTS}:{n}: pins {package}=={version}, not --pin {given}",
                    hint="the pin is stated once: fix one of them (check's invariant 1 compares them)",
                )
        return given, "--pin"
    if len(exact) == 1:
        n, version = exact[0]
        if VERSION_RE.match(version):
            return version, f"{REQUIREMENTS}:{n}"
    if found:
        raise AdoptError(
            f"{REQUIREMENTS}: no single {package}==VERSION line to take the pin from",
            hint="pass --pin VERSION",
        )
    raise AdoptError(f"no --pin and no {REQUIREMENTS} naming {package}", hint="pass --pin VERSION")


def _list_entries(root: Path, list_file: Path) -> list[tuple[Path, str]]:
    """quilt's series format: one patch per line, ``#`` comments, blank lines, an optional ``-p1``."""
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
    out: list[tuple[Path, str]] = []
    base = list_file.parent
    for number, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not line:
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
        out.append((path, origin))
    return out


def _headers(preamble: bytes, rel: str) -> tuple[dict[str, tuple[str, int]], str | None]:
    """The preamble's header lines (field -> (value, line)) and its Subject, if any."""
    headers: dict[str, tuple[str, int]] = {}
    subject: str | None = None
    lines = preamble.decode("utf-8", errors="backslashreplace").splitlines()
    for number, line in enumerate(lines, 1):
        m = _HEADER_RE.match(line)
        if m is None:
            continue
        key = m["key"].lower()
        if key == "subject" and subject is None:
            subject = m["value"]
            for more in lines[number:]:  # an RFC 822 folded Subject continues on indented lines
                if not more[:1].isspace() or not more.strip():
                    break
                subject += " " + more.strip()
            subject = _SUBJECT_PREFIX.sub("", subject).strip() or None
        elif key in HEADERS:
            field_name = HEADERS[key]
            if field_name in headers:
                raise AdoptError(
                    f"{rel}:{number}: a second {m['key']}: line (first on line "
                    f"{headers[field_name][1]})"
                )
            headers[field_name] = (m["value"], number)
    return headers, subject


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

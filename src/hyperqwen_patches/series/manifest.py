"""The manifest (``patches/manifest.yaml``): YAML → a typed, validated model.

The manifest states the pin once and orders and describes the rows of the series. Validation works on
the composed YAML node tree (not on the loaded Python objects) so that every problem can name the file,
the line and the field, and so that duplicate keys (which a plain ``yaml.safe_load`` silently collapses)
are caught. Every problem is collected; :class:`ManifestError` carries all of them at once.

The schema is documented in ``docs/manifest.md`` and published for editors as ``manifest.schema.json``
beside this module; a test keeps the two in step with the key sets below.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path, PurePosixPath

from hyperqwen_patches import records
from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.records import field, record

TYPE_CHECKING = False  # not typing's: a plain run never imports typing (a few ms of every start)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    import yaml


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


class LazyPattern:
    """A regular expression compiled on its first use. A warm run reads the validated model from
    the result cache and never validates, yet compiling these nine at import was 1.5 ms of the
    module's 2 (every ``apply`` and ``check`` paid it). Anything else is the compiled pattern's."""

    __slots__ = ("_args", "_compiled")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._args = (pattern, flags)
        self._compiled: re.Pattern[str] | None = None

    def __getattr__(self, name: str) -> Any:  # match, search, fullmatch, pattern, ...
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(*self._args)
        return getattr(compiled, name)


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

_STR = "tag:yaml.org,2002:str"
# Control characters other than tab and newline (which block scalars carry).
_CONTROL = LazyPattern(r"[\x00-\x08\x0b-\x1f\x7f]")
_INT = "tag:yaml.org,2002:int"
_TAG_WORDS = {
    "tag:yaml.org,2002:str": "a string",
    "tag:yaml.org,2002:int": "an integer",
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:bool": "a boolean",
    "tag:yaml.org,2002:null": "null",
    "tag:yaml.org,2002:timestamp": "a date",
    "tag:yaml.org,2002:map": "a mapping",
    "tag:yaml.org,2002:seq": "a list",
}


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


def yaml_scalar(value: str) -> str:
    """A YAML scalar for ``value``: plain when unambiguous, double-quoted (JSON) otherwise; object names
    always quoted, so every SHA in the manifest looks the same (one that is all digits would be a number)."""
    import json  # a writer's need: reading a manifest (every apply) does not pay its import

    if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", value):
        return json.dumps(value)
    if re.fullmatch(r"[a-z][a-z0-9._/-]*", value) and value not in (
        "null",
        "true",
        "false",
        "yes",
        "no",
        "on",
        "off",
    ):
        return value
    return json.dumps(value, ensure_ascii=False)


def default_source(package: str, pin: str) -> str:
    return f"pypi:{package}=={pin}"


def find_repo_root(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` that holds ``patches/manifest.yaml``. Of any
    kind: a manifest that is a directory or a FIFO is then refused by name (``load_manifest``), not
    passed over for a repository further up."""
    start = start.resolve()
    for candidate in (start, *start.parents):
        if (candidate / MANIFEST_RELPATH).exists():
            return candidate
    return None


def resolve_repo(repo: Path | None) -> Path:
    """The repository to work on: ``repo`` as given, else the nearest one at or above the cwd."""
    if repo is not None:
        if not (repo / MANIFEST_RELPATH).exists():
            raise UsageError(
                f"{repo} is not a hyperqwen-patches repository (no {MANIFEST_RELPATH} in it)",
                hint="pass --repo with the directory that holds patches/manifest.yaml",
            )
        return repo
    found = find_repo_root(Path.cwd())
    if found is None:
        raise UsageError(
            f"no {MANIFEST_RELPATH} in {Path.cwd()} or any directory above it",
            hint="run inside the repository or pass --repo PATH",
        )
    return found


def inside_repo(root: Path, name: str) -> Path:
    """``root / name``, refused (UsageError) when it is a link leading out of the repository: the
    series' files (``patches/``) and the tool's work (``.hqp/``) are read and written there, and a
    link would carry those reads and writes to wherever it points."""
    path = root / name
    if path.is_symlink():
        target = path.resolve()
        if not target.is_relative_to(root.resolve()):
            raise UsageError(
                f"{path} is a link to {target}, outside the repository {root}",
                hint=f"make {name} a directory of the repository (or a link inside it)",
            )
    return path


def load_manifest(root: Path) -> Manifest:
    """Read and validate ``<root>/patches/manifest.yaml``; raise :class:`ManifestError` with every problem."""
    inside_repo(root, "patches")
    path = root / MANIFEST_RELPATH
    shown = MANIFEST_RELPATH
    from hyperqwen_patches.inputfile import read_repo_file

    try:
        data = read_repo_file(path, "the manifest", shown=shown)
    except FileNotFoundError:
        raise ManifestError([Problem(shown, 0, "", f"no manifest at {path}")]) from None
    except ValueError as exc:  # a directory, a FIFO (opening it would wait forever), a device
        raise ManifestError([Problem(shown, 0, "", str(exc))]) from None
    return parse_manifest(data, path=path, root=root, shown=shown)


def parse_manifest(data: bytes, *, path: Path, root: Path, shown: str | None = None) -> Manifest:
    """Validate manifest bytes; ``shown`` is the name used in messages (default: ``path``).

    A manifest that validated before is read back from the result cache instead (the model is a pure
    function of the bytes and of this module's code, which the key covers): a warm run never imports
    PyYAML, about a third of a 50-row ``apply``. An invalid manifest is never cached, so its problems
    are found and listed on every run.
    """
    from hyperqwen_patches.records import replace

    digest = _cache_key(data)
    if digest is not None:
        from hyperqwen_patches import resultcache

        stored = resultcache.load(_CACHE_NAME, digest)
        model = _decode(stored) if stored is not None else None
        if isinstance(model, Manifest):
            return replace(model, path=path, root=root)
    model = _Validator(data, path=path, root=root, shown=shown or str(path)).run()
    if digest is not None:
        from hyperqwen_patches import resultcache

        resultcache.store(_CACHE_NAME, digest, _encode(model))
    return model


# --- the validated model in the result cache ---------------------------------------------------------

_CACHE_NAME = "manifest"


def _cache_key(data: bytes) -> str | None:
    """The key of a manifest's model: its bytes and this module's source (a change to the validator or
    to the model's classes is a different key, so an entry never outlives the code that made it)."""
    import sys

    from hyperqwen_patches import resultcache

    if not resultcache.enabled():
        return None
    try:
        code = Path(__file__).read_bytes()
    except OSError:
        return None
    return resultcache.key(_CACHE_NAME, sys.version, [code, data])


def _encode(value: Any) -> Any:
    """The model as JSON: a record as ``{"$": class, field: ...}``; ``path`` and ``root`` are left
    out (they are where the bytes were read, not what they say) and put back on reading."""
    if isinstance(value, tuple):
        return [_encode(v) for v in value]
    if hasattr(value, "__record_fields__"):
        fields = {k: getattr(value, k) for k in records.fields(value) if k not in ("path", "root")}
        return {"$": type(value).__name__, **{k: _encode(v) for k, v in fields.items()}}
    return value


def _decode(value: Any) -> Any:
    """The model back from :func:`_encode`'s JSON; None where the entry is not one (it is recomputed).
    Only the model's own classes are built, from their own fields."""
    classes = {
        c.__name__: c for c in (Manifest, Row, ExportPoint, Retirement, AcceptedName, RuntimeKnob)
    }
    try:
        return _build(value, classes)
    except (TypeError, KeyError, AttributeError):
        return None


def _build(value: Any, classes: Mapping[str, type]) -> Any:
    if isinstance(value, list):
        return tuple(_build(v, classes) for v in value)
    if isinstance(value, dict):
        cls = classes[value["$"]]
        kwargs = {k: _build(v, classes) for k, v in value.items() if k != "$"}
        if cls is Manifest:
            kwargs.update(path=Path(), root=Path())
        return cls(**kwargs)
    return value


# --- validation -------------------------------------------------------------------------------------


def _what(node: yaml.Node) -> str:
    return str(_TAG_WORDS.get(node.tag, node.tag))


@record
class _Validator:
    data: bytes
    path: Path
    root: Path
    shown: str
    problems: list[Problem] = field(default_factory=list)

    def fail(
        self, node: yaml.Node | None, where: str, message: str, *, line: int | None = None
    ) -> None:
        if line is None:
            line = node.start_mark.line + 1 if node is not None else 0
        self.problems.append(Problem(self.shown, line, where, message))

    # -- node helpers

    def mapping(
        self, node: yaml.Node, where: str, required: tuple[str, ...], optional: tuple[str, ...]
    ) -> dict[str, yaml.Node] | None:
        """A mapping's keys → value nodes; reports wrong type, duplicate, unknown and missing keys."""
        import yaml

        if not isinstance(node, yaml.MappingNode):
            self.fail(node, where or "(document)", f"must be a mapping, got {_what(node)}")
            return None
        known = required + optional
        out: dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:
            key_where = f"{where}.{key_node.value}" if where else str(key_node.value)
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != _STR:
                self.fail(
                    key_node, where or "(document)", f"keys must be strings, got {_what(key_node)}"
                )
                continue
            key = key_node.value
            if key in out:
                first = out[key].start_mark.line + 1
                self.fail(key_node, key_where, f"duplicate key (first given on line {first})")
                continue
            if key not in known:
                import difflib  # only a misspelt key pays for it

                close = difflib.get_close_matches(key, known, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                self.fail(key_node, key_where, f"unknown key{hint} (known: {', '.join(known)})")
                continue
            out[key] = value_node
        for key in required:
            if key not in out:
                self.fail(node, f"{where}.{key}" if where else key, "required field is missing")
        return out

    def string(self, node: yaml.Node | None, where: str, *, optional: bool = False) -> str | None:
        import yaml

        if node is None:
            return None
        if optional and isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null":
            return None
        if not isinstance(node, yaml.ScalarNode) or node.tag != _STR:
            hint = " (quote it)" if isinstance(node, yaml.ScalarNode) else ""
            self.fail(node, where, f"must be a string, got {_what(node)}{hint}")
            return None
        value = str(node.value)
        if not value.strip():
            self.fail(node, where, "must not be empty")
            return None
        control = _CONTROL.search(value)
        if control is not None:
            # Manifest strings reach terminals, CI logs and PATCHES.md: an ESC would recolour or
            # rewrite them, a NUL cut a path short.
            self.fail(
                node,
                where,
                f"contains the control character {control.group()!r} "
                f"(at character {control.start() + 1}); write it out or leave it out",
            )
            return None
        # Block scalars (what: |) end in a newline; surrounding white space never carries meaning.
        return value.strip()

    def matching(
        self,
        node: yaml.Node | None,
        where: str,
        pattern: LazyPattern | re.Pattern[str],
        what: str,
        *,
        optional: bool = False,
    ) -> str | None:
        value = self.string(node, where, optional=optional)
        if value is not None and not pattern.match(value):
            self.fail(node, where, f"{value!r} is not {what}")
            return None
        return value

    def sequence(self, node: yaml.Node | None, where: str) -> list[yaml.Node]:
        import yaml

        if node is None:
            return []
        if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null":
            return []  # "rows:" with nothing after it: an empty list, as a person means it
        if not isinstance(node, yaml.SequenceNode):
            self.fail(node, where, f"must be a list, got {_what(node)}")
            return []
        return list(node.value)

    def relpath(self, node: yaml.Node | None, where: str) -> str | None:
        value = self.string(node, where)
        if value is None:
            return None
        pure = PurePosixPath(value)
        if "\\" in value or pure.is_absolute() or ".." in pure.parts or str(pure) != value:
            self.fail(
                node,
                where,
                f"{value!r} must be a plain relative path inside the repository "
                "(forward slashes, no '..', no leading '/', no './' or trailing '/')",
            )
            return None
        return value

    # -- the document

    def run(self) -> Manifest:
        import yaml

        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        if self.data.startswith((b"\xff\xfe", b"\xfe\xff")):
            self.fail(None, "", "the manifest is UTF-16; save it as UTF-8", line=1)
            raise ManifestError(self.problems)
        try:
            self.data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = self.data.count(b"\n", 0, exc.start) + 1
            column = exc.start - (self.data.rfind(b"\n", 0, exc.start) + 1) + 1
            byte = self.data[exc.start : exc.start + 1].hex()
            self.fail(
                None,
                "",
                f"not UTF-8: byte 0x{byte} at column {column}; save it as UTF-8",
                line=line,
            )
            raise ManifestError(self.problems) from None
        try:
            root_node = yaml.compose(self.data, Loader=loader)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark is not None else 0
            self.fail(None, "", f"YAML syntax: {exc.problem or exc.context}", line=line)
            raise ManifestError(self.problems) from None
        except yaml.YAMLError as exc:
            self.fail(None, "", f"YAML syntax: {exc}")
            raise ManifestError(self.problems) from None
        if root_node is None:
            self.fail(None, "", "the manifest is empty", line=1)
            raise ManifestError(self.problems)
        top = self.mapping(root_node, "", TOP_REQUIRED, TOP_OPTIONAL)
        if top is None:
            raise ManifestError(self.problems)

        fmt = self.format(top.get("format"))
        pin = self.matching(top.get("pin"), "pin", VERSION_RE, "a release version such as 0.29.0")
        package = self.matching(top.get("package"), "package", PACKAGE_RE, "a package name")
        paths = "root"
        if "paths" in top:
            value = self.string(top["paths"], "paths")
            if value is not None and value not in PATH_CONVENTIONS:
                self.fail(
                    top["paths"], "paths", f"{value!r} is not one of {', '.join(PATH_CONVENTIONS)}"
                )
            elif value is not None:
                paths = value
        source = self.source(top.get("source"), package, pin)
        export_points = self.export_points(top.get("export_points"))
        rows = self.rows(top.get("rows"), export_points)
        retirements = self.retirements(top.get("retirements"), rows)
        knob_prefixes = self.knob_prefixes(top.get("knob_prefixes"))
        accepted_names = [
            AcceptedName(*entry)
            for entry in self.reasons(
                top.get("accepted_names"),
                "accepted_names",
                DOTTED_RE,
                "a dotted name such as vllm.envs.X",
            )
        ]
        runtime_knobs = [
            RuntimeKnob(*entry)
            for entry in self.reasons(
                top.get("runtime_knobs"), "runtime_knobs", KNOB_RE, "a knob name such as VLLM_X"
            )
        ]

        series = self.relpath(top.get("series"), "series") or DEFAULT_SERIES
        requirements: str | None = DEFAULT_REQUIREMENTS
        if "requirements" in top:
            node = top["requirements"]
            requirements = (
                None if node.tag == "tag:yaml.org,2002:null" else self.relpath(node, "requirements")
            )
        checksums = self.relpath(top.get("checksums"), "checksums")
        series_tail = self.series_text(
            top.get("series_tail"), "series_tail", SERIES_COMMENT_RE, SERIES_COMMENT_SHAPE
        )
        named = [p for p in (series, requirements, checksums) if p is not None]
        if len(set(named)) != len(named):
            self.fail(
                top.get("series"), "series", "series, requirements and checksums name one file"
            )

        if self.problems:
            raise ManifestError(self.problems)
        assert pin is not None and package is not None and fmt is not None
        return Manifest(
            path=self.path,
            root=self.root,
            format=fmt,
            pin=pin,
            package=package,
            source=source or default_source(package, pin),
            paths=paths,
            export_points=tuple(export_points),
            rows=tuple(rows),
            retirements=tuple(retirements),
            knob_prefixes=tuple(knob_prefixes),
            accepted_names=tuple(accepted_names),
            runtime_knobs=tuple(runtime_knobs),
            series=series,
            requirements=requirements,
            checksums=checksums,
            series_tail=series_tail,
        )

    def format(self, node: yaml.Node | None) -> int | None:
        import yaml

        if node is None:
            return None
        if not isinstance(node, yaml.ScalarNode) or node.tag != _INT:
            self.fail(node, "format", f"must be the integer {FORMAT}, got {_what(node)}")
            return None
        if not node.value.isdigit():  # YAML 1.1 ints also read 0x1, 0b1 and 1:00 (sexagesimal)
            self.fail(
                node, "format", f"must be the integer {FORMAT} written plainly, got {node.value!r}"
            )
            return None
        if int(node.value) != FORMAT:
            self.fail(
                node,
                "format",
                f"format {node.value} is not understood by this version (which reads format {FORMAT})",
            )
            return None
        return FORMAT

    def source(self, node: yaml.Node | None, package: str | None, pin: str | None) -> str | None:
        from hyperqwen_patches.sources.spec import SourceSpecError, parse_source

        value = self.string(node, "source")
        if value is None:
            return None
        try:
            spec = parse_source(value)
        except SourceSpecError as exc:
            self.fail(node, "source", exc.message)
            return None
        # The pin is stated once: a PyPI source naming another version or package is a contradiction.
        if spec.kind == "pypi":
            if package is not None and spec.package != package:
                self.fail(
                    node, "source", f"names package {spec.package!r} but package is {package!r}"
                )
            if pin is not None and spec.version != pin:
                self.fail(node, "source", f"names version {spec.version} but the pin is {pin}")
        return value

    def export_points(self, node: yaml.Node | None) -> list[ExportPoint]:
        out: list[ExportPoint] = []
        seen: dict[str, int] = {}
        for i, item in enumerate(self.sequence(node, "export_points")):
            where = f"export_points[{i}]"
            keys = self.mapping(item, where, EXPORT_POINT_REQUIRED, EXPORT_POINT_OPTIONAL)
            if keys is None:
                continue
            name = self.matching(keys.get("name"), f"{where}.name", NAME_RE, "a name ([a-z0-9._-])")
            branch = self.string(keys.get("branch"), f"{where}.branch")
            commit = self.matching(
                keys.get("commit"), f"{where}.commit", COMMIT_RE, "a full commit SHA", optional=True
            )
            base = self.matching(
                keys.get("base"), f"{where}.base", COMMIT_RE, "a full commit SHA", optional=True
            )
            line = item.start_mark.line + 1
            if name is not None and name in seen:
                self.fail(
                    item,
                    f"{where}.name",
                    f"duplicate export point {name!r} (first on line {seen[name]})",
                )
                continue
            if name is not None:
                seen[name] = line
            if name is not None and branch is not None:
                out.append(
                    ExportPoint(name=name, branch=branch, commit=commit, base=base, line=line)
                )
        return out

    def rows(self, node: yaml.Node | None, export_points: list[ExportPoint]) -> list[Row]:
        out: list[Row] = []
        names: dict[str, int] = {}
        sources: dict[str, tuple[int, str]] = {}
        declared = {e.name for e in export_points}
        for i, item in enumerate(self.sequence(node, "rows")):
            before = len(self.problems)
            row = self.row(item, f"rows[{i}]", names, sources, declared)
            # Any problem in this row (and only this row) keeps it out of the model.
            if row is not None and len(self.problems) == before:
                out.append(row)
        # A module directory inside another row's directory would be copied twice.
        dirs = sorted((r for r in out if r.files is not None), key=lambda r: str(r.files))
        for ra, rb in itertools.pairwise(dirs):
            if str(rb.files).startswith(f"{ra.files}/"):
                self.fail(
                    None,
                    f"rows.{rb.name}.files",
                    f"{rb.files!r} lies inside row {ra.name!r}'s {ra.files!r}",
                    line=rb.line,
                )
        return out

    def row(
        self,
        item: yaml.Node,
        where: str,
        names: dict[str, int],
        sources: dict[str, tuple[int, str]],
        declared: set[str],
    ) -> Row | None:
        keys = self.mapping(item, where, ROW_REQUIRED, ROW_OPTIONAL)
        if keys is None:
            return None
        line = item.start_mark.line + 1
        name = self.matching(keys.get("name"), f"{where}.name", NAME_RE, "a row name ([a-z0-9._-])")
        if name is not None:
            if name in names:
                self.fail(
                    keys["name"],
                    f"{where}.name",
                    f"duplicate row {name!r} (first on line {names[name]})",
                )
            else:
                names[name] = line
        kind = self.string(keys.get("kind"), f"{where}.kind")
        if kind is not None and kind not in KINDS:
            self.fail(
                keys["kind"],
                f"{where}.kind",
                f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}",
            )
        what = self.string(keys.get("what"), f"{where}.what")
        cut_text = self.string(keys.get("cut_against"), f"{where}.cut_against")
        cut = cut_note = None
        if cut_text is not None:
            m = CUT_RE.match(cut_text)
            if m is None:
                self.fail(
                    keys["cut_against"],
                    f"{where}.cut_against",
                    f"{cut_text!r} is not a release version (optionally followed by a note, "
                    "as in '0.31.0: adapted to #54809')",
                )
            else:
                cut, cut_note = m["version"], m["note"]
        unset = self.unset(keys.get("unset"), f"{where}.unset")
        retires = self.string(keys.get("retires_when"), f"{where}.retires_when")
        upstream = self.string(keys.get("upstream"), f"{where}.upstream", optional=True)
        skip = self.string(keys.get("skip"), f"{where}.skip")
        patch = self.relpath(keys.get("patch"), f"{where}.patch")
        files = self.relpath(keys.get("files"), f"{where}.files")
        if "patch" in keys and "files" in keys:
            self.fail(
                item,
                where,
                "give either patch (a patch file) or files (a module directory), not both",
            )
        elif "patch" not in keys and "files" not in keys:
            self.fail(
                item, f"{where}.patch", "required field is missing (or files, for a module row)"
            )
        if patch is not None and not patch.endswith(PATCH_SUFFIXES):
            self.fail(keys["patch"], f"{where}.patch", f"{patch!r} must end in .patch or .diff")
        src_key = "patch" if patch is not None else "files"
        src = patch if patch is not None else files
        if src is not None:
            if src in sources:
                first_line, first_name = sources[src]
                self.fail(
                    keys[src_key],
                    f"{where}.{src_key}",
                    f"{src!r} is already row {first_name!r} (line {first_line})",
                )
            else:
                sources[src] = (line, name or "?")
        if kind == "backport" and upstream is None and "upstream" not in keys:
            self.fail(item, f"{where}.upstream", "a backport must name its upstream reference")
        export_point = self.string(keys.get("export_point"), f"{where}.export_point")
        if export_point is not None and export_point not in declared:
            listed = ", ".join(sorted(declared)) or "none declared"
            self.fail(
                keys["export_point"],
                f"{where}.export_point",
                f"{export_point!r} is not a declared export point ({listed})",
            )
        commit = self.matching(
            keys.get("commit"), f"{where}.commit", COMMIT_RE, "a full commit SHA"
        )
        if "commit" in keys and "export_point" not in keys:
            self.fail(
                item, f"{where}.export_point", "a row with a commit must name its export point"
            )
        git_apply, git_apply_flags = self.git_apply(keys.get("git_apply"), f"{where}.git_apply")
        if git_apply and "files" in keys:
            self.fail(
                keys["git_apply"],
                f"{where}.git_apply",
                "git_apply is for patch rows; a module row is copied, not applied",
            )
        series_comment = self.series_text(
            keys.get("series_comment"),
            f"{where}.series_comment",
            SERIES_COMMENT_RE,
            SERIES_COMMENT_SHAPE,
        )
        series_line_comment = self.series_text(
            keys.get("series_line_comment"),
            f"{where}.series_line_comment",
            SERIES_LINE_COMMENT_RE,
            "is white space then a '#' comment, on one line (written after the entry)",
        )
        series_options = self.string(keys.get("series_options"), f"{where}.series_options")
        if series_options is not None and series_options not in SERIES_OPTIONS:
            self.fail(
                keys["series_options"],
                f"{where}.series_options",
                f"{series_options!r}: the only option is -p1 (every row applies with -p1)",
            )
        if not (name and kind and what and cut and retires):
            return None
        return Row(
            name=name,
            kind=kind,
            what=what,
            cut_against=cut,
            retires_when=retires,
            patch=patch,
            files=files,
            upstream=upstream,
            export_point=export_point,
            commit=commit,
            skip=skip,
            git_apply=bool(git_apply),
            git_apply_flags=git_apply_flags,
            line=line,
            cut_note=cut_note,
            unset=unset,
            series_comment=series_comment,
            series_options=series_options,
            series_line_comment=series_line_comment,
        )

    def series_text(
        self, node: yaml.Node | None, where: str, pattern: LazyPattern, shape: str
    ) -> str | None:
        """Text kept from an adopted series file for render to write back, in its ``shape``."""
        text = self.comment(node, where)
        if text is not None and not pattern.match(text):
            self.fail(node, where, shape)
            return None
        return text

    def comment(self, node: yaml.Node | None, where: str) -> str | None:
        """A block of comment lines, kept as written (``string`` strips; a blank line is content here)."""
        import yaml

        if node is None:
            return None
        if not isinstance(node, yaml.ScalarNode) or node.tag != _STR:
            self.fail(node, where, f"must be a string, got {_what(node)}")
            return None
        control = _CONTROL.search(node.value)
        if control is not None:
            self.fail(node, where, f"contains the control character {control.group()!r}")
            return None
        return str(node.value)

    def retirements(self, node: yaml.Node | None, rows: list[Row]) -> list[Retirement]:
        out: list[Retirement] = []
        seen: dict[tuple[str, str, str | None], int] = {}
        active = {r.name for r in rows if r.skip is None}
        for i, item in enumerate(self.sequence(node, "retirements")):
            where = f"retirements[{i}]"
            keys = self.mapping(item, where, RETIREMENT_REQUIRED, RETIREMENT_OPTIONAL)
            if keys is None:
                continue
            before = len(self.problems)
            row = self.matching(keys.get("row"), f"{where}.row", NAME_RE, "a row name")
            pin = self.matching(keys.get("pin"), f"{where}.pin", VERSION_RE, "a release version")
            upstream = self.string(keys.get("upstream"), f"{where}.upstream")
            reason = self.string(keys.get("reason"), f"{where}.reason")
            evidence = self.string(keys.get("evidence"), f"{where}.evidence")
            hunk = self.string(keys.get("hunk"), f"{where}.hunk")
            line = item.start_mark.line + 1
            if len(self.problems) != before or None in (row, pin, upstream, reason, evidence):
                continue
            assert row and pin and upstream and reason and evidence
            key = (row, pin, hunk)
            if key in seen:
                self.fail(
                    item,
                    where,
                    f"duplicate retirement of {row!r} at {pin} (first on line {seen[key]})",
                )
                continue
            seen[key] = line
            if hunk is None and row in active:
                self.fail(
                    keys["row"],
                    f"{where}.row",
                    f"row {row!r} is retired but still applied: remove it from rows or give it a skip reason",
                )
                continue
            out.append(Retirement(row, pin, upstream, reason, evidence, hunk, line))
        return out

    def boolean(self, node: yaml.Node | None, where: str) -> bool | None:
        import yaml

        if node is None:
            return None
        if not isinstance(node, yaml.ScalarNode) or node.tag != "tag:yaml.org,2002:bool":
            self.fail(node, where, f"must be true or false, got {_what(node)}")
            return None
        return node.value.lower() in ("true", "yes", "on")

    def git_apply(self, node: yaml.Node | None, where: str) -> tuple[bool | None, tuple[str, ...]]:
        """``true``/``false``, or the flags the series' own ``git apply --check`` passes (a list:
        the row is checked, with them); series/gitapplyflags.py says which flags may be stated."""
        import yaml

        from hyperqwen_patches.series import gitapplyflags

        if not isinstance(node, yaml.SequenceNode):
            return self.boolean(node, where), ()
        flags = [self.string(item, f"{where}[{i}]") for i, item in enumerate(node.value)]
        if not flags:
            self.fail(node, where, "an empty list: write true (no flags) or name the flags")
        given = [f or "" for f in flags]
        for i, message in gitapplyflags.problems(given):
            if flags[i] is not None:
                self.fail(node.value[i], f"{where}[{i}]", message)
        return True, tuple(given)

    def unset(self, node: yaml.Node | None, where: str) -> tuple[str, ...]:
        out: list[str] = []
        for i, item in enumerate(self.sequence(node, where)):
            value = self.string(item, f"{where}[{i}]")
            if value is not None and value not in UNSET_FIELDS:
                self.fail(
                    item, f"{where}[{i}]", f"{value!r} is not one of {', '.join(UNSET_FIELDS)}"
                )
            elif value is not None:
                out.append(value)
        return tuple(out)

    def knob_prefixes(self, node: yaml.Node | None) -> list[str]:
        out: list[str] = []
        for i, item in enumerate(self.sequence(node, "knob_prefixes")):
            value = self.matching(
                item, f"knob_prefixes[{i}]", KNOB_PREFIX_RE, "a knob prefix such as MYAPP_"
            )
            if value is not None:
                out.append(value)
        return out

    def reasons(
        self, node: yaml.Node | None, key: str, pattern: LazyPattern | re.Pattern[str], what: str
    ) -> list[tuple[str, str, int]]:
        """A list of ``{name, reason}`` (accepted_names, runtime_knobs): (name, reason, line) each."""
        out: list[tuple[str, str, int]] = []
        seen: dict[str, int] = {}
        for i, item in enumerate(self.sequence(node, key)):
            where = f"{key}[{i}]"
            keys = self.mapping(item, where, ACCEPTED_NAME_REQUIRED, ())
            if keys is None:
                continue
            name = self.matching(keys.get("name"), f"{where}.name", pattern, what)
            reason = self.string(keys.get("reason"), f"{where}.reason")
            line = item.start_mark.line + 1
            if name is not None and name in seen:
                self.fail(
                    item,
                    f"{where}.name",
                    f"{name!r} is listed twice (first on line {seen[name]})",
                )
                continue
            if name is not None and reason is not None:
                seen[name] = line
                out.append((name, reason, line))
        return out

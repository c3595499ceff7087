"""The manifest's validation: the composed YAML node tree (not the loaded Python objects) checked key by
key, so that every problem names the file, the line and the field, and duplicate keys (which a plain
``yaml.safe_load`` silently collapses) are caught. Every problem is collected; ``ManifestError`` carries
all of them at once."""

from __future__ import annotations

import itertools
import re
from pathlib import Path, PurePosixPath

from hyperqwen_patches.lazypattern import LazyPattern
from hyperqwen_patches.records import field, record
from hyperqwen_patches.series.manifestmodel import (
    ACCEPTED_NAME_REQUIRED,
    COMMIT_RE,
    CUT_RE,
    DEFAULT_REQUIREMENTS,
    DEFAULT_SERIES,
    DOTTED_RE,
    EXPORT_POINT_OPTIONAL,
    EXPORT_POINT_REQUIRED,
    FORMAT,
    KINDS,
    KNOB_PREFIX_RE,
    KNOB_RE,
    NAME_RE,
    PACKAGE_RE,
    PATCH_SUFFIXES,
    PATH_CONVENTIONS,
    RETIREMENT_OPTIONAL,
    RETIREMENT_REQUIRED,
    ROW_OPTIONAL,
    ROW_REQUIRED,
    SERIES_COMMENT_RE,
    SERIES_COMMENT_SHAPE,
    SERIES_LINE_COMMENT_RE,
    SERIES_OPTIONS,
    TOP_OPTIONAL,
    TOP_REQUIRED,
    UNSET_FIELDS,
    VERSION_RE,
    AcceptedName,
    ExportPoint,
    Manifest,
    ManifestError,
    Problem,
    Retirement,
    Row,
    RuntimeKnob,
    default_source,
)

TYPE_CHECKING = False  # not typing's: a plain run never imports typing (a few ms of every start)
if TYPE_CHECKING:
    import yaml

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


def _what(node: yaml.Node) -> str:
    return str(_TAG_WORDS.get(node.tag, node.tag))


@record
class Validator:
    """One manifest's validation: :meth:`run` returns the model or raises ``ManifestError``."""

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

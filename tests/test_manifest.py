"""The manifest model: valid input becomes a typed model; every bad input is named by file, line and field,
all problems at once, and nothing is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hyperqwen_patches.errors import ExitCode, UsageError
from hyperqwen_patches.records import replace
from hyperqwen_patches.series import manifestmodel as m
from hyperqwen_patches.series.manifest import load_manifest, parse_manifest
from hyperqwen_patches.series.manifestmodel import ManifestError

REPO = Path(__file__).resolve().parent.parent
SHA_A = "a" * 40
SHA_B = "b" * 40

VALID = f"""\
format: 1
pin: "0.29.0"
package: vllm
source: pypi:vllm==0.29.0
paths: root
export_points:
  - name: main
    branch: hyperqwen/v0.29.0
    commit: {SHA_A}
    base: {SHA_B}
rows:
  - name: memory-profile-after-warmup
    patch: patches/0001-memory-profile-after-warmup.patch
    kind: fix
    what: Profile memory after the warm-up | not before
    upstream: https://github.com/vllm-project/vllm/pull/1
    cut_against: "0.29.0"
    retires_when: upstream merges the PR
    export_point: main
    commit: {SHA_A}
  - name: kvarn-modules
    files: kvarn/files
    kind: own
    what: KVarN modules
    cut_against: "0.29.0"
    retires_when: never (our own code)
  - name: old-fix
    patch: patches/0003-old-fix.patch
    kind: backport
    what: an old backport
    upstream: vllm-project/vllm#2
    cut_against: "0.28.0"
    retires_when: "0.30.0"
    skip: carried by 0.29.0 already
retirements:
  - row: old-fix
    pin: "0.29.0"
    upstream: vllm-project/vllm#2
    reason: merged upstream
    evidence: reverse-applies on the 0.29.0 wheel
"""


def parse(text: str) -> m.Manifest:
    return parse_manifest(
        text.encode(),
        path=Path("/r/patches/manifest.yaml"),
        root=Path("/r"),
        shown="patches/manifest.yaml",
    )


def problems(text: str) -> list[str]:
    with pytest.raises(ManifestError) as info:
        parse(text)
    return [str(p) for p in info.value.problems]


def test_valid_manifest_becomes_the_model() -> None:
    man = parse(VALID)
    assert (man.pin, man.package, man.source, man.paths) == (
        "0.29.0",
        "vllm",
        "pypi:vllm==0.29.0",
        "root",
    )
    assert man.export_points == (m.ExportPoint("main", "hyperqwen/v0.29.0", SHA_A, SHA_B, line=7),)
    assert [r.name for r in man.rows] == ["memory-profile-after-warmup", "kvarn-modules", "old-fix"]
    assert [r.name for r in man.active_rows] == ["memory-profile-after-warmup", "kvarn-modules"]
    first, module, old = man.rows
    assert first.patch == "patches/0001-memory-profile-after-warmup.patch" and not first.is_module
    assert first.line == 12 and first.commit == SHA_A and first.export_point == "main"
    assert module.is_module and module.files == "kvarn/files" and module.upstream is None
    assert old.skip == "carried by 0.29.0 already"
    assert man.retirements[0].row == "old-fix" and man.retirements[0].line == 36
    # The JSON form is plain data with every key.
    assert json.loads(json.dumps(man.to_json()))["rows"][1]["files"] == "kvarn/files"


def test_source_defaults_to_pypi_pin_and_empty_lists() -> None:
    man = parse('format: 1\npin: "0.29.0"\npackage: vllm\nrows: []\n')
    assert man.source == "pypi:vllm==0.29.0" and man.paths == "root"
    assert man.rows == () and man.export_points == () and man.retirements == ()


def test_shipped_manifest_is_valid() -> None:
    man = load_manifest(REPO)
    assert man.pin == "0.29.0" and man.package == "vllm"
    assert man.source == f"pypi:vllm=={man.pin}"


def test_syntax_error_names_file_and_line() -> None:
    got = problems('format: 1\npin: "0.29.0"\nrows: [\n  - name: x\n')
    assert len(got) == 1
    assert got[0].startswith("patches/manifest.yaml:4: YAML syntax:"), got


def test_missing_required_field_names_row_line_and_field() -> None:
    text = VALID.replace("    kind: own\n", "")
    assert problems(text) == ["patches/manifest.yaml:21: rows[1].kind: required field is missing"]


def test_wrong_types_are_named() -> None:
    text = VALID.replace('pin: "0.29.0"', "pin: 0.29").replace(
        "skip: carried by 0.29.0 already", "skip: true"
    )
    assert problems(text) == [
        "patches/manifest.yaml:2: pin: must be a string, got a number (quote it)",
        "patches/manifest.yaml:34: rows[2].skip: must be a string, got a boolean (quote it)",
        "patches/manifest.yaml:37: retirements[0].pin: must be a string, got a number (quote it)",
    ]
    assert problems('format: 1\npin: "1.0"\npackage: vllm\nrows: {a: 1}\n') == [
        "patches/manifest.yaml:4: rows: must be a list, got a mapping"
    ]
    assert problems("- 1\n") == [
        "patches/manifest.yaml:1: (document): must be a mapping, got a list"
    ]


def test_unknown_kind_lists_the_kinds() -> None:
    got = problems(VALID.replace("kind: fix", "kind: fixx"))
    assert got == [
        "patches/manifest.yaml:14: rows[0].kind: unknown kind 'fixx'; expected one of backport, fix, feature, local, own"
    ]


def test_unknown_keys_are_errors_with_a_suggestion() -> None:
    got = problems(VALID.replace("retires_when: never", "retire_when: never"))
    assert got == [
        "patches/manifest.yaml:26: rows[1].retire_when: unknown key; did you mean 'retires_when'? "
        "(known: name, kind, what, cut_against, retires_when, patch, files, upstream, export_point, commit, skip, git_apply, unset, series_comment, series_options, series_line_comment)",
        "patches/manifest.yaml:21: rows[1].retires_when: required field is missing",
    ]
    assert problems(VALID.replace("paths: root", "pathz: root"))[0].startswith(
        "patches/manifest.yaml:5: pathz: unknown key; did you mean 'paths'?"
    )


def test_duplicate_rows_keys_and_files() -> None:
    dup_name = VALID.replace("name: kvarn-modules", "name: memory-profile-after-warmup")
    assert problems(dup_name) == [
        "patches/manifest.yaml:21: rows[1].name: duplicate row 'memory-profile-after-warmup' (first on line 12)"
    ]
    dup_file = VALID.replace(
        "patches/0003-old-fix.patch", "patches/0001-memory-profile-after-warmup.patch"
    )
    assert problems(dup_file) == [
        "patches/manifest.yaml:28: rows[2].patch: 'patches/0001-memory-profile-after-warmup.patch' "
        "is already row 'memory-profile-after-warmup' (line 12)"
    ]
    dup_key = VALID.replace("    kind: own\n", "    kind: own\n    kind: local\n")
    assert problems(dup_key) == [
        "patches/manifest.yaml:24: rows[1].kind: duplicate key (first given on line 23)"
    ]


def test_every_problem_is_reported_at_once() -> None:
    text = (
        VALID.replace("kind: fix", "kind: fixx")
        .replace("files: kvarn/files", "files: ../kvarn/files")
        .replace('cut_against: "0.28.0"', "cut_against: soon")
        .replace("evidence: reverse-applies on the 0.29.0 wheel\n", "")
    )
    got = problems(text)
    assert [g.split(": ", 2)[1] for g in got] == [
        "rows[0].kind",
        "rows[1].files",
        "rows[2].cut_against",
        "retirements[0].evidence",
    ]
    assert all(g.startswith("patches/manifest.yaml:") for g in got)


def test_cross_references_are_checked() -> None:
    text = VALID.replace("    export_point: main\n", "    export_point: side\n").replace(
        "    skip: carried by 0.29.0 already\n", ""
    )
    assert problems(text) == [
        "patches/manifest.yaml:19: rows[0].export_point: 'side' is not a declared export point (main)",
        "patches/manifest.yaml:35: retirements[0].row: row 'old-fix' is retired but still applied: "
        "remove it from rows or give it a skip reason",
    ]
    wrong_pin = VALID.replace("source: pypi:vllm==0.29.0", "source: pypi:vllm==0.30.0")
    assert problems(wrong_pin) == [
        "patches/manifest.yaml:4: source: names version 0.30.0 but the pin is 0.29.0"
    ]
    no_upstream = VALID.replace(
        "    upstream: vllm-project/vllm#2\n    cut_against", "    cut_against"
    )
    assert problems(no_upstream) == [
        "patches/manifest.yaml:27: rows[2].upstream: a backport must name its upstream reference"
    ]


def test_paths_must_stay_inside_the_repository() -> None:
    for bad in ("/etc/x.patch", "../x.patch", "patches/./x.patch", "patches\\x.patch"):
        got = problems(VALID.replace("patches/0003-old-fix.patch", bad))
        assert len(got) == 1 and "rows[2].patch" in got[0] and "plain relative path" in got[0], got
    assert problems(VALID.replace("0003-old-fix.patch", "0003-old-fix.txt")) == [
        "patches/manifest.yaml:28: rows[2].patch: 'patches/0003-old-fix.txt' must end in .patch or .diff"
    ]


def test_format_version_and_empty_file() -> None:
    assert problems(VALID.replace("format: 1", "format: 2")) == [
        "patches/manifest.yaml:1: format: format 2 is not understood by this version (which reads format 1)"
    ]
    assert problems("") == ["patches/manifest.yaml:1: the manifest is empty"]


def test_manifest_error_is_a_usage_error_with_every_line() -> None:
    with pytest.raises(ManifestError) as info:
        parse(VALID.replace("kind: fix", "kind: fixx").replace("kind: own", "kind: 3"))
    exc = info.value
    assert isinstance(exc, UsageError) and exc.exit_code == ExitCode.USAGE
    lines = exc.message.splitlines()
    assert lines[0] == "patches/manifest.yaml: 2 problems in the manifest"
    assert len(lines) == 3


def test_schema_json_matches_the_model() -> None:
    """The published JSON Schema and the validator's key sets must not drift apart."""
    schema = json.loads((REPO / "src/hyperqwen_patches/manifest.schema.json").read_text())
    assert set(schema["properties"]) == set(m.TOP_REQUIRED + m.TOP_OPTIONAL)
    assert set(schema["required"]) == set(m.TOP_REQUIRED)
    defs = schema["$defs"]
    for key, required, optional in (
        ("row", m.ROW_REQUIRED, m.ROW_OPTIONAL),
        ("export_point", m.EXPORT_POINT_REQUIRED, m.EXPORT_POINT_OPTIONAL),
        ("retirement", m.RETIREMENT_REQUIRED, m.RETIREMENT_OPTIONAL),
    ):
        assert set(defs[key]["properties"]) == set(required + optional), key
        assert set(defs[key]["required"]) == set(required), key
        assert defs[key]["additionalProperties"] is False
    assert defs["row"]["properties"]["kind"]["enum"] == list(m.KINDS)
    assert schema["additionalProperties"] is False


def test_cli_reports_every_problem_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "patches").mkdir()
    bad = VALID.replace("kind: fix", "kind: fixx").replace("kind: own", "kind: 3")
    (tmp_path / "patches/manifest.yaml").write_text(bad)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    for argv in (["render"], ["check"]):
        proc = subprocess.run(
            [sys.executable, "-m", "hyperqwen_patches", *argv, "--repo", str(tmp_path)],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 2, proc
        assert "patches/manifest.yaml: 2 problems in the manifest" in proc.stderr
        assert "patches/manifest.yaml:14: rows[0].kind: unknown kind 'fixx'" in proc.stderr
        assert (
            "patches/manifest.yaml:23: rows[1].kind: must be a string, got an integer"
            in proc.stderr
        )
        assert "Traceback" not in proc.stderr
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("value", ["0x1", "0b1", "1:00"])
def test_format_in_another_integer_spelling_is_a_problem_not_a_traceback(value: str) -> None:
    """YAML 1.1 reads 0x1, 0b1 and 1:00 as integers; int() of them raised a raw ValueError."""
    got = problems(VALID.replace("format: 1", f"format: {value}"))
    assert got == [
        f"patches/manifest.yaml:1: format: must be the integer 1 written plainly, got '{value}'"
    ]


@pytest.mark.parametrize(("char", "shown"), [("\\0", "'\\x00'"), ("\\e[31m", "'\\x1b'")])
def test_control_characters_in_strings_are_refused(char: str, shown: str) -> None:
    """A NUL in a row path was a traceback; an ESC in a string recoloured terminals and PATCHES.md."""
    text = VALID.replace("kind: fix", f'kind: fix\n    upstream: "x{char}y"', 1)
    got = problems(text)
    assert any(f"upstream: contains the control character {shown}" in g for g in got), got


def test_a_manifest_that_is_not_utf8_names_line_and_column() -> None:
    data = VALID.encode().replace(b"format: 1\n", b"format: 1\n# caf\xe9\n", 1)
    with pytest.raises(ManifestError) as info:
        parse_manifest(data, path=Path("patches/manifest.yaml"), root=Path("."))
    [got] = [str(p) for p in info.value.problems]
    assert got.startswith("patches/manifest.yaml:")
    assert "not UTF-8: byte 0xe9 at column 6" in got
    utf16 = VALID.encode("utf-16")
    with pytest.raises(ManifestError, match="UTF-16"):
        parse_manifest(utf16, path=Path("patches/manifest.yaml"), root=Path("."))


# --- the validated model in the result cache (series/manifestcache.py: a warm run skips PyYAML) ---------


def cache_entries(root: Path) -> list[Path]:
    return sorted((root / "results" / "manifest").glob("*.json"))


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HQP_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def fresh(data: bytes, monkeypatch: pytest.MonkeyPatch) -> m.Manifest:
    with monkeypatch.context() as mp:
        mp.setenv("HQP_RESULT_CACHE", "0")
        return parse_manifest(data, path=Path("/x/patches/manifest.yaml"), root=Path("/x"))


@pytest.mark.parametrize("which", ["valid", "shipped", "realseries"])
def test_a_cached_model_is_the_model_parsed_afresh(
    which: str, own_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if which == "valid":
        data = VALID.encode()
    elif which == "shipped":
        data = (Path(__file__).resolve().parents[1] / "patches/manifest.yaml").read_bytes()
    else:
        sys.path.insert(0, str(Path(__file__).parent))
        from realseries import RUNTIME_KNOBS, write_project

        project = write_project(tmp_path / "real")
        knobs = [x for k in RUNTIME_KNOBS for x in ("--runtime-knob", f"{k}: runtime only")]
        subprocess.run(
            [sys.executable, "-m", "hyperqwen_patches", "adopt", "patches/series", "--append",
             "kvarn/apply-order", "--modules", "kvarn/modules", *knobs],
            cwd=project.root, check=True, capture_output=True,
        )  # fmt: skip
        data = (project.root / "patches/manifest.yaml").read_bytes()
    first = parse_manifest(data, path=Path("/a/patches/manifest.yaml"), root=Path("/a"))
    assert len(cache_entries(own_cache)) == 1
    again = parse_manifest(data, path=Path("/b/patches/manifest.yaml"), root=Path("/b"))
    expected = fresh(data, monkeypatch)
    assert (again.path, again.root) == (Path("/b/patches/manifest.yaml"), Path("/b"))
    for got in (first, again):
        assert replace(got, path=expected.path, root=expected.root) == expected
    assert again.to_json() == expected.to_json()


def test_a_damaged_or_foreign_entry_is_recomputed(
    own_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = VALID.encode()
    expected = fresh(data, monkeypatch)
    parse(VALID)
    (entry,) = cache_entries(own_cache)
    digest = entry.stem
    for junk in (
        b"{not json",
        b"",
        json.dumps({"key": digest, "value": {"$": "os.system", "name": "x"}}).encode(),
        json.dumps({"key": digest, "value": {"$": "Manifest", "rows": 3}}).encode(),
        json.dumps({"key": digest, "value": [1, 2]}).encode(),
        json.dumps({"key": "0" * 64, "value": {}}).encode(),
    ):
        entry.write_bytes(junk)
        got = parse(VALID)
        assert replace(got, path=expected.path, root=expected.root) == expected, junk


def test_an_invalid_manifest_is_never_cached(own_cache: Path) -> None:
    bad = VALID.replace("kind: fix", "kind: fixx")
    for _ in range(2):  # the problems are found on every run
        assert any("kind" in p for p in problems(bad))
    assert cache_entries(own_cache) == []


def test_an_edited_manifest_is_a_new_entry(own_cache: Path) -> None:
    parse(VALID)
    edited = parse(VALID.replace("an old backport", "an older backport"))
    assert edited.row("old-fix").what == "an older backport"  # type: ignore[union-attr]
    assert len(cache_entries(own_cache)) == 2


def test_the_cache_key_covers_every_module_that_makes_the_model() -> None:
    """The model, its validator and the codec live in three modules since the split of manifest.py:
    a change to any of them must be a new key, or a stale model outlives the code that made it."""
    from hyperqwen_patches.series import manifestcache
    from hyperqwen_patches.series.validation import Validator

    makers = {Validator, m.Manifest, m.Row, manifestcache.encode, manifestcache.decode}
    files = {Path(sys.modules[x.__module__].__file__ or "").name for x in makers}
    assert files <= set(manifestcache._SOURCES)
    here = Path(manifestcache.__file__).parent
    assert all((here / name).is_file() for name in manifestcache._SOURCES)


def test_a_series_in_its_own_folder_its_pin_file_and_its_sums() -> None:
    """#38: a series kept in patches/vllm-0.29/ beside another release's, with SHA256SUMS, and a
    requirements file pinning another build's release."""
    text = VALID + (
        "series: patches/vllm-0.29/series\nrequirements: null\n"
        "checksums: patches/vllm-0.29/SHA256SUMS\n"
    )
    model = parse(text)
    assert (model.series, model.series_dir, model.ledger) == (
        "patches/vllm-0.29/series",
        "patches/vllm-0.29",
        "patches/vllm-0.29/PATCHES.md",
    )
    assert (model.requirements, model.checksums) == (None, "patches/vllm-0.29/SHA256SUMS")
    default = parse(VALID)
    assert (default.series, default.ledger, default.requirements, default.checksums) == (
        "patches/series",
        "PATCHES.md",
        "docker/requirements.txt",
        None,
    )
    assert problems(VALID + "series: patches/x\nchecksums: patches/x\n") == [
        "patches/manifest.yaml:41: series: series, requirements and checksums name one file"
    ]
    assert problems(VALID + "series: ../series\n")[0].endswith(
        "must be a plain relative path inside the repository "
        "(forward slashes, no '..', no leading '/', no './' or trailing '/')"
    )


def test_a_rows_series_comment_and_option() -> None:
    row = "    retires_when: never (our own code)\n"
    kept = VALID.replace(
        row, row + '    series_comment: "# group\\n\\n"\n    series_options: "-p1"\n'
    )
    modules = parse(kept).row("kvarn-modules")
    assert modules is not None
    assert (modules.series_comment, modules.series_options) == ("# group\n\n", "-p1")
    bad = VALID.replace(row, row + '    series_comment: "group\\n"\n    series_options: "-p0"\n')
    assert problems(bad) == [
        "patches/manifest.yaml:27: rows[1].series_comment: holds only '#' comment lines and blank "
        "lines, each ending in a newline",
        "patches/manifest.yaml:28: rows[1].series_options: '-p0': the only option is -p1 (every row "
        "applies with -p1)",
    ]


def test_schema_patterns_are_the_validators() -> None:
    """Each pattern the published schema states is the validator's own, spelled for JSON Schema:
    ECMA-262's ``$`` (end of input) where Python's ``re`` needs ``\\Z`` (its ``$`` also matches
    before a final newline, which a name must not end with)."""
    schema = json.loads((REPO / "src/hyperqwen_patches/manifest.schema.json").read_text())
    defs = schema["$defs"]
    pairs = {
        "package": (schema["properties"]["package"]["pattern"], m.PACKAGE_RE),
        "knob_prefixes": (
            schema["properties"]["knob_prefixes"]["items"]["pattern"],
            m.KNOB_PREFIX_RE,
        ),
        "version": (defs["version"]["pattern"], m.VERSION_RE),
        "name": (defs["name"]["pattern"], m.NAME_RE),
        "commit": (defs["commit"]["pattern"], m.COMMIT_RE),
        "runtime_knob.name": (defs["runtime_knob"]["properties"]["name"]["pattern"], m.KNOB_RE),
        "accepted_name.name": (defs["accepted_name"]["properties"]["name"]["pattern"], m.DOTTED_RE),
        "row.series_comment": (
            defs["row"]["properties"]["series_comment"]["pattern"],
            m.SERIES_COMMENT_RE,
        ),
    }
    for where, (published, validator) in pairs.items():
        assert published == validator.pattern.replace("\\Z", "$"), where


def test_git_apply_states_the_series_flags_or_is_refused_by_line_and_field() -> None:
    """#38: `git_apply: true` or the flags the series' own `git apply --check` passes."""
    flagged = VALID.replace(
        "    commit: " + SHA_A + "\n  - name: kvarn-modules",
        "    commit: "
        + SHA_A
        + "\n    git_apply: [--ignore-whitespace, -C2]\n  - name: kvarn-modules",
    )
    row = parse(flagged).rows[0]
    assert (row.git_apply, row.git_apply_flags) == (True, ("--ignore-whitespace", "-C2"))
    assert (
        parse(flagged.replace("[--ignore-whitespace, -C2]", "true")).rows[0].git_apply_flags == ()
    )
    bad = flagged.replace("[--ignore-whitespace, -C2]", "[--ignore-whitespace, --index, 3]")
    assert problems(bad) == [
        "patches/manifest.yaml:21: rows[0].git_apply[2]: must be a string, got an integer (quote it)",
        "patches/manifest.yaml:21: rows[0].git_apply[1]: '--index' is not a flag a row may state; "
        "allowed: --ignore-whitespace, --ignore-space-change, --recount, --inaccurate-eof, "
        "--unidiff-zero, --allow-empty, --whitespace=<nowarn|warn|error|error-all>, -C<n>",
    ]
    assert problems(flagged.replace("[--ignore-whitespace, -C2]", "[]")) == [
        "patches/manifest.yaml:21: rows[0].git_apply: an empty list: write true (no flags) or name "
        "the flags"
    ]


def test_series_text_kept_from_an_adopted_file_is_checked_for_its_shape() -> None:
    """A comment after an entry (`series_line_comment`) and after the last (`series_tail`) are
    written back by render, so they may hold only what a series file's comments hold."""
    line = '    series_options: -p1\n    series_line_comment: "  # flaky"\n'
    kept = VALID.replace(
        "    commit: " + SHA_A + "\n  - name: kvarn-modules",
        "    commit: " + SHA_A + "\n" + line + "  - name: kvarn-modules",
    ).replace("rows:\n", 'series_tail: "\\n# the end\\n"\nrows:\n', 1)
    man = parse(kept)
    assert (man.rows[0].series_line_comment, man.series_tail) == ("  # flaky", "\n# the end\n")
    bad = kept.replace('"  # flaky"', '"not a comment"').replace("# the end", "x")
    assert [p.split(": ", 2)[1:] for p in problems(bad)] == [
        [
            "rows[0].series_line_comment",
            "is white space then a '#' comment, on one line (written after the entry)",
        ],
        ["series_tail", "holds only '#' comment lines and blank lines, each ending in a newline"],
    ]

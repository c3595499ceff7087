"""Every ``--json`` document validates against its published schema (``src/hyperqwen_patches/schemas``).

Each command runs for real: on the shipped series (check, list, statics, render, cache, import,
export --check) and on the realistic 52-file series of ``tests/realseries.py`` (adopt, apply, apply
--dry-run, apply --check-applied, status, unapply, port to a changed copy of its release, diff). Then
each schema is shown to bind: a document with a required key removed, or a key it does not list,
fails it.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from realseries import RUNTIME_KNOBS, Project, write_project

REPO = Path(__file__).resolve().parents[1]
SCHEMAS = REPO / "src/hyperqwen_patches/schemas"


def hqp(*args: str | Path, cwd: Path | None = None, ok: tuple[int, ...] = (0,)) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )
    assert proc.returncode in ok, (args, proc.returncode, proc.stderr[-2000:])
    return json.loads(proc.stdout)


def schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


def validate(name: str, doc: dict) -> None:
    jsonschema.Draft202012Validator(schema(name)).validate(doc)


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, dict]]:
    """label -> (schema name, the document a real run printed)."""
    tmp = tmp_path_factory.mktemp("json")
    docs: dict[str, tuple[str, dict]] = {}
    # The shipped series.
    docs["check"] = ("check", hqp("check", "--json", cwd=REPO))
    docs["list"] = ("list", hqp("list", "--json", cwd=REPO))
    docs["statics"] = ("statics", hqp("statics", "--json", cwd=REPO))
    docs["render --check"] = ("render", hqp("render", "--check", "--json", cwd=REPO))
    docs["cache"] = ("cache", hqp("cache", "--json", cwd=REPO))
    fork = tmp / "fork"
    docs["import"] = ("import", hqp("import", "--into", fork, "--create", "--json", cwd=REPO))
    docs["export --check"] = (
        "export-check",
        hqp("export", "--check", "--fork", fork, "--json", cwd=REPO),
    )
    # The realistic series.
    gen: Project = write_project(tmp / "realseries")
    root = gen.root
    knobs = [x for k in RUNTIME_KNOBS for x in ("--runtime-knob", f"{k}: runtime only")]
    adopt = ["adopt", "patches/series", "--append", "kvarn/apply-order"]
    adopt += ["--modules", "kvarn/modules", *knobs]
    docs["adopt --dry-run"] = ("adopt", hqp(*adopt, "--dry-run", "--json", cwd=root))
    docs["adopt"] = ("adopt", hqp(*adopt, "--json", cwd=root))
    site = tmp / "site"
    shutil.copytree(gen.pristine, site)
    docs["apply --dry-run"] = ("apply", hqp("apply", site, "--repo", root, "--dry-run", "--json"))
    docs["apply"] = ("apply", hqp("apply", site, "--repo", root, "--json"))
    docs["apply again"] = ("apply", hqp("apply", site, "--repo", root, "--json"))
    applied = hqp("apply", site, "--repo", root, "--check-applied", "--json")
    docs["apply --check-applied"] = ("apply-check-applied", applied)
    docs["status"] = ("status", hqp("status", site, "--repo", root, "--json"))
    docs["unapply"] = ("unapply", hqp("unapply", site, "--repo", root, "--json"))
    nxt = tmp / "next"
    shutil.copytree(gen.pristine, nxt)
    first = sorted((nxt / "vllm").rglob("*.py"))[0]
    first.write_text("# moved upstream\n" + first.read_text())
    port = ["port", "--repo", root, "--to", "9.9.9", "--source", f"dir:{nxt}"]
    port += ["--from-source", f"dir:{gen.pristine}", "--json"]
    docs["port"] = ("port", hqp(*port, ok=(0, 1)))
    docs["diff"] = ("diff", hqp("diff", f"dir:{gen.root}", f"dir:{REPO}", "--json", ok=(0, 1)))
    # An error that came first.
    docs["error"] = ("error", hqp("check", "--json", "--repo", tmp, ok=(2,)))
    return docs


SCHEMA_NAMES = sorted(p.name.removesuffix(".schema.json") for p in SCHEMAS.glob("*.schema.json"))


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_each_schema_is_a_valid_draft_2020_12_schema(name: str) -> None:
    jsonschema.Draft202012Validator.check_schema(schema(name))


def test_every_command_with_json_has_a_schema_and_a_real_document(
    documents: dict[str, tuple[str, dict]],
) -> None:
    from hyperqwen_patches.commands.argtable import TABLE

    with_json = {name for name, spec in TABLE.items() if "--json" in json.dumps(spec)}
    covered = {label.split()[0] for label in documents}
    assert with_json <= covered, with_json - covered
    assert {s for s, _ in documents.values()} == set(SCHEMA_NAMES)


def test_every_document_validates(documents: dict[str, tuple[str, dict]]) -> None:
    for label, (name, doc) in documents.items():
        try:
            validate(name, doc)
        except jsonschema.ValidationError as exc:
            pytest.fail(f"{label}: {exc.message} at {list(exc.absolute_path)}")


def test_the_schemas_bind(documents: dict[str, tuple[str, dict]]) -> None:
    """A required key taken away, or a key the schema does not list, fails the document."""
    for label, (name, doc) in documents.items():
        required = schema(name)["required"]
        missing = copy.deepcopy(doc)
        del missing[required[0]]
        with pytest.raises(jsonschema.ValidationError):
            validate(name, missing)
        extra = copy.deepcopy(doc)
        extra["undocumented"] = 1
        with pytest.raises(jsonschema.ValidationError, match="undocumented"):
            validate(name, extra)
        assert label  # (named in the failure output)

"""Every ``--json`` document validates against its published schema (``src/hyperqwen_patches/schemas``).

Each command runs for real: on the shipped series (check, list, statics, render, cache, import,
export --check) and on the realistic 52-file series of ``tests/realseries.py`` (adopt, apply, apply
--dry-run, apply --check-applied, status, unapply, port to a changed copy of its release, diff). Then
each schema is shown to bind: a document with a required key removed, or a key it does not list,
fails it.

Every way a ``--json`` run can end is fed too, each a real process: an invalid manifest, usage
errors (click's and the command's own), a finding, a check that could not run, and SIGTERM and
SIGINT mid-run. The incident: ``check --json`` on an invalid manifest printed ``{exit_code,
findings, ok, rows}``, valid against neither check.schema.json nor error.schema.json; a finding
still printed ``error: check: exit 1`` on stderr beside its document; a signal left stdout empty.
"""

from __future__ import annotations

import copy
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
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
def documents(
    tmp_path_factory: pytest.TempPathFactory,
    error_paths: dict[str, tuple[str, int, subprocess.CompletedProcess[str]]],
) -> dict[str, tuple[str, dict]]:
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
    # Every other way a --json run ends (error_paths).
    for label, (name, _code, proc) in error_paths.items():
        docs[label] = (name, json.loads(proc.stdout))
    return docs


def run(*args: str | Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )


def signalled(sig: signal.Signals, tmp: Path) -> subprocess.CompletedProcess[str]:
    """``check --json`` against a dir: source one of whose files is a FIFO, sent ``sig`` while it
    reads that file: the run is then mid-check (the manifest read, the checks under way, no
    document yet) whatever the machine's speed. Our write end is opened only once the run has
    opened the FIFO to read (O_NONBLOCK: ENXIO until then), the signal goes in, then our end is
    closed so that the thread reading it sees end of file and the run can unwind."""
    tree = tmp / f"slow-{sig.name}"
    (tree / "vllm").mkdir(parents=True)
    (tree / "vllm/__init__.py").write_text("x = 1\n")
    fifo = tree / "vllm/slow.py"
    os.mkfifo(fifo)

    def default_signals() -> None:  # a parent that ignores them (a background job) is not ours
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    argv = [sys.executable, "-m", "hyperqwen_patches", "check", "--json", "--source", f"dir:{tree}"]
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )
    deadline = time.monotonic() + 300
    while True:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as exc:
            if exc.errno != errno.ENXIO or proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                out, err = proc.communicate()
                pytest.fail(f"the run never read {fifo}: rc {proc.returncode}, {err[-2000:]}")
            time.sleep(0.01)
    try:
        proc.send_signal(sig)
    finally:
        os.close(fd)
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@pytest.fixture(scope="module")
def error_paths(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[str, int, subprocess.CompletedProcess[str]]]:
    """label -> (schema name, the exit code, the finished process) for each way a run can end
    other than well."""
    tmp = tmp_path_factory.mktemp("errors")
    bad = tmp / "bad"
    (bad / "patches").mkdir(parents=True)
    (bad / "patches/manifest.yaml").write_text(
        "format: 1\npin: 0.29\npackage: vllm\nrows: []\nextra: 1\n"
    )
    small = tmp / "small"
    (small / "vllm").mkdir(parents=True)
    (small / "vllm/__init__.py").write_text("x = 1\n")
    return {
        "check (invalid manifest)": ("error", 2, run("check", "--json", "--repo", bad)),
        "list (invalid manifest)": ("error", 2, run("list", "--json", "--repo", bad)),
        "check (usage error, click's)": ("error", 2, run("check", "--json", "--max-offset=-1")),
        "check (usage error, an unknown option)": ("error", 2, run("check", "--json", "--nope")),
        "apply (usage error, the command's)": (
            "error",
            2,
            run("apply", small, "--json", "--patch", small / "x.patch", "--repo", REPO),
        ),
        "check (a finding)": ("check", 1, run("check", "--json", "--source", f"dir:{small}")),
        "check (could not run)": (
            "check",
            2,
            run("check", "--json", "--source", f"git:{small}@no-such-ref"),
        ),
        "check (SIGTERM)": ("error", 143, signalled(signal.SIGTERM, tmp)),
        "check (SIGINT)": ("error", 130, signalled(signal.SIGINT, tmp)),
    }


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


def test_every_error_path_ends_with_one_valid_document(
    error_paths: dict[str, tuple[str, int, subprocess.CompletedProcess[str]]],
) -> None:
    for label, (name, code, proc) in error_paths.items():
        assert proc.returncode == code, (label, proc.returncode, proc.stderr[-2000:])
        doc = json.loads(proc.stdout)  # the whole of stdout: one document, nothing beside it
        assert doc["exit_code"] == code and doc["ok"] is False, label
        validate(name, doc)
        assert "Traceback" not in proc.stderr, (label, proc.stderr[-2000:])


def test_an_invalid_manifest_keeps_each_problem_with_its_file_and_line(
    error_paths: dict[str, tuple[str, int, subprocess.CompletedProcess[str]]],
) -> None:
    for label in ("check (invalid manifest)", "list (invalid manifest)"):
        doc = json.loads(error_paths[label][2].stdout)
        assert doc["problems"] == [
            {
                "path": "patches/manifest.yaml",
                "line": 5,
                "field": "extra",
                "message": doc["problems"][0]["message"],
            },
            {
                "path": "patches/manifest.yaml",
                "line": 2,
                "field": "pin",
                "message": "must be a string, got a number (quote it)",
            },
        ]
        assert doc["problems"][0]["message"].startswith("unknown key")
        assert doc["error"].startswith("patches/manifest.yaml: 2 problems in the manifest")


def test_stderr_says_an_error_once(
    error_paths: dict[str, tuple[str, int, subprocess.CompletedProcess[str]]],
) -> None:
    """The command's own document carries the outcome: no `error: check: exit 1` beside it. An
    error that came before any document is on stderr once, for the person reading the log."""
    for label in ("check (a finding)", "check (could not run)"):
        stderr = error_paths[label][2].stderr
        assert not [line for line in stderr.splitlines() if line.startswith("error:")], stderr
    invalid = error_paths["check (invalid manifest)"][2].stderr
    assert invalid.count("error: patches/manifest.yaml: 2 problems") == 1
    for label, line in (("check (SIGTERM)", "terminated (SIGTERM)"),
                        ("check (SIGINT)", "interrupted (SIGINT)")):  # fmt: skip
        assert error_paths[label][2].stderr.splitlines().count(line) == 1, label

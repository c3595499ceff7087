"""Every command README.md and docs/*.md show still runs, and prints what they show (issue #42).

The docs went stale without a test saying so: a warning that no longer exists, counts the tool no
longer prints, a transcript of a row this series does not have. This test runs what a reader would
copy.

What is a command. The ```` ```console ```` blocks only (other blocks are code, YAML or output). In a
block with a line starting ``$ ``, those lines are commands and the lines after each, up to the next
``$ `` or the end of the block, are its shown output. In a block without ``$``, every non-blank line
is a command and none shows output. A command goes on while its line ends with ``\\`` or bash says it
is unfinished (``for ...; do`` up to ``done``); a trailing ``# comment`` (a ``#`` starting a word,
outside quotes, as bash reads it) is dropped.

How it runs. One scratch clone per document (``git clone`` of the repository under test, named
``hyperqwen-patches`` as a reader's clone is, with the working tree's uncommitted and untracked files
copied over it, so a doc edit is tested before it is committed), every command of that document in
order, each in ``bash`` with ``pipefail``, in the directory the previous ``cd`` left. ``hqp`` and
``hyperqwen-patches`` resolve to the interpreter running this test (its bin directory first on
PATH) and the clone's ``src`` (PYTHONPATH), so no venv is built per test; the clone's ``./hqp`` and
``.venv/bin/python`` are shims to the same. An absolute ``/tmp/`` in a command is moved into the
test's scratch directory, so runs do not share files. The environment is the tests' isolated one
(conftest.py) without CI's annotation variables and terminal size: the docs show a terminal.

How it is judged. A command must exit 0, unless its entry in ``RULES`` names the exit status the
doc describes in words (``port`` exits 1 when a row conflicts; then that status is required, since a
documented failure that turned into success is news too). Shown output is compared with stdout and
stderr as the terminal interleaves them, after both are normalized: ANSI escapes dropped, trailing
blanks dropped, an absolute path reduced to its last component (``/src/fork`` and the test's
``/tmp/.../fork`` both read ``…/fork``), a duration (``1.2 s``, ``340 ms``) read as ``<time>``. Then
the shown lines must match all of the output, where a line ``...`` stands for any number of lines and
``...`` inside a line for any text on that line (doctest's ELLIPSIS). A rule may instead name a part
of the document that is the command's output byte for byte (port-matrix.md's report).

Commands that cannot run here are listed in ``RULES`` with the reason, as is what a command needs
that the doc assumes (a fork at ``../fork``, ``$SITE``): a table here rather than markers in the
docs, so the docs stay free of test plumbing, and an entry no command matches any more fails
``test_every_rule_names_a_shown_command``. A document with a runnable command that needs PyPI (the
pristine wheel of a release, on first use) is marked ``network``; one with a command of half a
minute or more, ``slow``.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CLONE_NAME = "hyperqwen-patches"
COMMAND_TIMEOUT_S = 600
# Where this interpreter's install put the tool's scripts (.venv/bin under ./hqp and CI).
TOOL_BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Shown:
    """One command of a document, as a reader would copy it."""

    doc: str
    line: int
    command: str
    output: list[str] | None

    @property
    def key(self) -> str:
        return self.command.splitlines()[0]


@dataclass
class Scratch:
    """What a rule's setup or verification may touch: the clone, the scratch dir, the environment."""

    clone: Path
    tmp: Path
    env: dict[str, str]
    cwd: Path


@dataclass(frozen=True)
class Rule:
    """What a command needs beyond a scratch clone; ``why`` is shown with a skip or a failure."""

    why: str
    skip: bool = False
    network: bool = False
    slow: bool = False
    exit_code: int = 0
    setup: Callable[[Scratch], None] | None = None
    # The command's output is the document's text between these two lines (None: to the end).
    output_in_doc: tuple[str, str | None] | None = None
    verify: Callable[[Scratch], None] | None = None


def sh(scratch: Scratch, script: str) -> str:
    proc = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + script],
        cwd=scratch.cwd,
        env=scratch.env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, f"setup failed ({proc.returncode}): {script}\n{proc.stderr}"
    return proc.stdout


def fresh_fork(scratch: Scratch) -> None:
    """``../fork``, the fork the doc's reader has, built by import; a rebase a previous command
    paused goes with it (its state lives in the fork)."""
    for stale in ("fork", "fork-port-0.30.0"):
        shutil.rmtree(scratch.clone.parent / stale, ignore_errors=True)
    sh(scratch, "hqp import --into ../fork --create")


def tool_cache(env: dict[str, str]) -> Path:
    """The tool's cache dir by the rule docs/manifest.md gives (the tests' environment sets it)."""
    if env.get("HQP_CACHE"):
        return Path(env["HQP_CACHE"])
    xdg = env.get("XDG_CACHE_HOME") or str(Path(env["HOME"]) / ".cache")
    return Path(xdg) / "hyperqwen-patches"


def site_packages(scratch: Scratch) -> None:
    """``$SITE``: a site-packages holding the pristine 0.29.0 package, from the tool's cached wheel
    (``.so`` files left out: the series touches none)."""
    entry = tool_cache(scratch.env) / "pypi" / "vllm-0.29.0-wheel"
    if not sorted(entry.glob("*.whl")):
        sh(scratch, "hqp check >/dev/null 2>&1 || true")
    wheels = sorted(entry.glob("*.whl"))
    assert wheels, f"no wheel in {entry} after check filled the cache"
    site = scratch.tmp / "site-packages"
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = [n for n in wheel.namelist() if n.startswith("vllm/") and not n.endswith(".so")]
        wheel.extractall(site, names)
    scratch.env["SITE"] = str(site)


def check_report(scratch: Scratch) -> None:
    (scratch.cwd / "out.json").write_text(sh(scratch, "hqp check --json"))


def diff_revisions(scratch: Scratch) -> None:
    """The revisions port.md's diff examples name: ``main`` (this commit, so ``--exit-code`` has
    nothing beyond positional drift to report), ``v1`` (the commit before) and a second checkout."""
    sh(
        scratch,
        "git branch -f main HEAD\n"
        "git tag -f v1 HEAD~1 2>/dev/null || git tag -f v1 HEAD\n"
        "rm -rf ../other-checkout && git clone -q . ../other-checkout",
    )


def manifest_typos(scratch: Scratch) -> None:
    """The two mistakes manifest.md describes: the first row's kind misspelt, the second row's
    ``retires_when`` key misspelt."""
    manifest = scratch.clone / "patches" / "manifest.yaml"
    text = manifest.read_text(encoding="utf-8")
    text = re.sub(r"(?m)^(    kind: )fix$", r"\1fixx", text, count=1)
    second = [m.start() for m in re.finditer(r"(?m)^    retires_when:", text)][1]
    text = text[:second] + "    retire_when:" + text[second + len("    retires_when:") :]
    manifest.write_text(text, encoding="utf-8")


def rebased_every_release(scratch: Scratch) -> None:
    for version in ("0.30.0", "0.31.0", "0.32.0", "0.33.0"):
        reports = sorted(
            scratch.tmp.glob(f"{version}-*.json"), key=lambda p: int(p.stem.rsplit("-", 1)[1])
        )
        assert reports, f"no port --rebase report for {version}"
        last = json.loads(reports[-1].read_text())
        states = [r.get("rebase", {}).get("state") for r in last["reports"]]
        assert states == ["done"], f"{version}: the last --skip left the rebase {states}"


PORT_CONFLICTS = "port exits 1 when a row conflicts on the release, which the doc is about"
PAUSED = "port --rebase exits 1 when a row needs a person (the doc's subject)"
DIFF = Rule("the revisions and the checkout the doc names", setup=diff_revisions)
BENCHMARK = "a benchmark of several workloads or past commits: minutes of machine time"

# Keyed by (document, the command's first line as the document writes it, comment dropped).
RULES: dict[tuple[str, str], Rule] = {
    ("README.md", "./hqp check"): Rule("the pristine 0.29.0 wheel", network=True),
    ("README.md", "scripts/test"): Rule(
        "the whole suite (this test included) and a 5.5 GB vLLM environment: tens of minutes",
        skip=True,
    ),
    ("docs/adopting.md", "cd my-series"): Rule(
        "a shell-script series the doc assumes (my-series); tests/test_adopt.py runs these "
        "commands on a generated one",
        skip=True,
    ),
    (
        "docs/adopting.md",
        "hqp adopt patches/series --append kvarn/apply-order --modules kvarn/modules",
    ): Rule("runs in my-series (above)", skip=True),
    ("docs/adopting.md", "hqp check"): Rule("runs in my-series (above)", skip=True),
    ("docs/docker.md", "docker build -f docker/Dockerfile -t hyperqwen-vllm:0.29.0 ."): Rule(
        "Docker and the CUDA base image; tests/test_docker_*.py and scripts/docker-ci check the "
        "recipe without them",
        skip=True,
    ),
    (
        "docs/docker.md",
        "docker run --gpus all -p 8000:8000 -v /models:/models:ro hyperqwen-vllm:0.29.0 \\",
    ): Rule("Docker, a GPU and model weights", skip=True),
    ("docs/json.md", "hqp check --json | jq '.status'"): Rule(
        "the pristine 0.29.0 wheel", network=True
    ),
    ("docs/json.md", "hqp apply \"$SITE\" --json | jq '.totals'"): Rule(
        "the doc's $SITE: a site-packages with pristine vLLM 0.29.0",
        network=True,
        setup=site_packages,
    ),
    (
        "docs/json.md",
        "python -m jsonschema --instance out.json src/hyperqwen_patches/schemas/check.schema.json",
    ): Rule("the doc's out.json: a check --json document", network=True, setup=check_report),
    (
        "docs/engine.md",
        "HQP_DIFF_EXAMPLES=2000 .venv/bin/python -m pytest tests/test_differential_gnu.py -q",
    ): Rule("75 s of examples; the suite runs the same file at its default count", skip=True),
    ("docs/engine.md", ".venv/bin/python benchmarks/placement_bench.py"): Rule(
        "1,000 to 20,000 hunks beside GNU patch, best of 3 runs each: a minute; its figures are "
        "not shown output",
        slow=True,
    ),
    ("docs/performance.md", ".venv/bin/python benchmarks/bench_check.py"): Rule(
        BENCHMARK, skip=True
    ),
    (
        "docs/performance.md",
        ".venv/bin/python benchmarks/bench_check.py --workloads synth-50-3000,synth-50-30000 --runs 3 --before 9b71680",
    ): Rule(BENCHMARK, skip=True),
    (
        "docs/performance.md",
        ".venv/bin/python benchmarks/bench_check.py --workloads shipped --runs 9 --before e669bab",
    ): Rule(BENCHMARK, skip=True),
    (
        "docs/performance.md",
        ".venv/bin/python benchmarks/bench_check.py --workloads shipped --runs 9",
    ): Rule(BENCHMARK, skip=True),
    ("docs/performance.md", ".venv/bin/python benchmarks/bench_check.py --runs 7 \\"): Rule(
        BENCHMARK, skip=True
    ),
    ("docs/performance.md", ".venv/bin/python benchmarks/bench_port.py --runs 5"): Rule(
        "the 0.30.0 wheel; 30 s; its figures are not shown output", network=True, slow=True
    ),
    (
        "docs/port-matrix.md",
        "hqp port --to 0.30.0 --to 0.31.0 --to 0.32.0 --to 0.33.0 --markdown /tmp/matrix.md",
    ): Rule(PORT_CONFLICTS + "; the 0.30.0-0.33.0 wheels", network=True, slow=True, exit_code=1),
    (
        "docs/port-matrix.md",
        "python3 -c \"import re,sys; t=open('/tmp/matrix.md').read(); sys.stdout.write(re.sub(r'(?m)^#', '##', t))\"",
    ): Rule(
        "the doc says its report is this output, byte for byte",
        output_in_doc=("## The report", None),
    ),
    ("docs/port-matrix.md", "for v in 0.30.0 0.31.0 0.32.0 0.33.0; do"): Rule(
        "the loop's status is the last --skip's, 1 (skipped rows keep it 1); each release must end "
        "with the branch written",
        network=True,
        slow=True,
        exit_code=1,
        verify=rebased_every_release,
    ),
    (
        "docs/port-matrix.md",
        "hqp statics --to 0.30.0 --to 0.31.0 --to 0.32.0 --to 0.33.0 --markdown /tmp/statics.md",
    ): Rule("the 0.30.0-0.33.0 wheels", network=True),
    ("docs/port-matrix.md", "cat /tmp/statics.md"): Rule(
        "the doc says its static checks' report is this output, byte for byte",
        output_in_doc=("## The static checks' report", "## The report"),
    ),
    ("docs/manifest.md", "hqp check"): Rule(
        "the doc's two mistakes planted in the manifest; exit 2 for an invalid manifest",
        exit_code=2,
        setup=manifest_typos,
    ),
    ("docs/port.md", "hqp port --to 0.30.0"): Rule(PORT_CONFLICTS, network=True, exit_code=1),
    ("docs/port.md", "hqp port --to 0.30.0 --json > port-0.30.json"): Rule(
        PORT_CONFLICTS, network=True, exit_code=1
    ),
    ("docs/port.md", "hqp port --to 0.30.0 --to 0.31.0 --markdown docs/port-matrix.md"): Rule(
        PORT_CONFLICTS, network=True, exit_code=1
    ),
    ("docs/port.md", "hqp port --to 0.30.0 --rebase --fork ../fork"): Rule(
        PAUSED + "; the doc's ../fork, made by import",
        network=True,
        slow=True,
        exit_code=1,
        setup=fresh_fork,
    ),
    ("docs/port.md", "hqp diff main HEAD"): DIFF,
    ("docs/port.md", "hqp diff v1 dir:../other-checkout"): DIFF,
    ("docs/port.md", "hqp diff HEAD~1 HEAD --json"): DIFF,
    ("docs/port.md", "hqp diff main HEAD --exit-code"): DIFF,
}


# ---------------------------------------------------------------------------------------------------
# Reading the documents


def strip_comment(line: str) -> str:
    """``line`` without a trailing comment, where bash would see one: a ``#`` that starts a word
    outside quotes (so ``re.sub(r'(?m)^#', ...)`` keeps its ``#``)."""
    quote = ""
    escaped = False
    for i, ch in enumerate(line):
        if escaped:
            escaped = False
        elif ch == "\\" and quote != "'":
            escaped = True
        elif quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def unfinished(text: str) -> bool:
    if text.endswith("\\"):
        return True
    proc = subprocess.run(["bash", "-n", "-c", text], capture_output=True, check=False)
    return proc.returncode != 0


def parse_blocks(text: str) -> list[tuple[int, list[str]]]:
    """The console blocks of a Markdown text: (1-based line of the first line inside, lines)."""
    blocks: list[tuple[int, list[str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```console":
            start = i + 1
            end = start
            while end < len(lines) and not lines[end].lstrip().startswith("```"):
                end += 1
            blocks.append((start + 1, lines[start:end]))
            i = end
        i += 1
    return blocks


def parse_commands(doc: str, text: str) -> list[Shown]:
    shown: list[Shown] = []
    for first, lines in parse_blocks(text):
        transcript = any(line.startswith("$ ") for line in lines)
        i = 0
        while i < len(lines):
            line = lines[i]
            if (transcript and not line.startswith("$ ")) or not strip_comment(line).strip():
                i += 1
                continue
            at = first + i
            parts = [strip_comment(line[2:] if transcript else line)]
            i += 1
            while i < len(lines) and unfinished("\n".join(parts)):
                parts.append(strip_comment(lines[i]))
                i += 1
            output: list[str] | None = None
            if transcript:
                output = []
                while i < len(lines) and not lines[i].startswith("$ "):
                    output.append(lines[i])
                    i += 1
            shown.append(Shown(doc, at, "\n".join(parts), output))
    return shown


def documents(root: Path) -> list[str]:
    docs = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    return [d.relative_to(root).as_posix() for d in docs if d.is_file()]


# ---------------------------------------------------------------------------------------------------
# Judging the output

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
ABS_PATH = re.compile(r"(?<![\w.~\-/])/(?:[\w.@+\-]+/)*([\w.@+\-]+)")
DURATION = re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s|min)\b")


def normalize(text: str) -> list[str]:
    text = ANSI.sub("", text)
    text = ABS_PATH.sub(r"…/\1", text)
    text = DURATION.sub("<time>", text)
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def output_matches(shown: list[str], actual: str) -> bool:
    pattern: list[str] = []
    for line in normalize("\n".join(shown)):
        if line.strip() == "...":
            pattern.append(r"(?:[^\n]*\n)*?")
        else:
            pattern.append(".*?".join(re.escape(part) for part in line.split("...")) + r"\n")
    got = "".join(line + "\n" for line in normalize(actual))
    return re.fullmatch("".join(pattern), got) is not None


def doc_section(text: str, after: str, until: str | None) -> str:
    lines = text.splitlines(keepends=True)
    marks = [line.rstrip("\n") for line in lines]
    assert after in marks, f"the doc has no line {after!r} (RULES names it)"
    start = marks.index(after) + 1
    end = len(lines)
    if until is not None:
        assert until in marks[start:], f"the doc has no line {until!r} after {after!r}"
        end = marks.index(until, start)
    return "".join(lines[start:end]).strip("\n") + "\n"


# ---------------------------------------------------------------------------------------------------
# The scratch clone


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout


def make_clone(tmp: Path) -> Path:
    clone = tmp / CLONE_NAME
    git("clone", "-q", str(REPO), str(clone), cwd=tmp)
    head = git("rev-parse", "HEAD", cwd=REPO).strip()
    git("checkout", "-q", "--detach", head, cwd=clone)
    # The working tree as it is: what pytest runs against is what the docs are checked against.
    changed = git("ls-files", "-z", "--modified", "--others", "--exclude-standard", cwd=REPO)
    for rel in filter(None, changed.split("\0")):
        src, dst = REPO / rel, clone / rel
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
        elif dst.is_file():
            dst.unlink()
    make_venv_shims(clone)
    return clone


def make_venv_shims(clone: Path) -> None:
    """``./hqp`` and ``.venv/bin/python`` in the clone run this interpreter's install: shell shims
    (a symlinked python would not find its venv), a stamp newer than pyproject.toml so ``./hqp``
    does not install, and nothing written into the real venv."""
    shims = {
        "python": f'exec "{sys.executable}" "$@"',
        "python3": f'exec "{sys.executable}" "$@"',
        "hyperqwen-patches": f'exec "{TOOL_BIN / "hyperqwen-patches"}" "$@"',
    }
    bin_dir = clone / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, body in shims.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    stamp = clone / ".venv" / ".hqp-installed"
    stamp.touch()
    mtime = stamp.stat().st_mtime - 60
    os.utime(clone / "pyproject.toml", (mtime, mtime))


def doc_env(clone: Path) -> dict[str, str]:
    env = dict(os.environ)
    for var in ("HQP_PROG", "HQP_ANNOTATIONS", "GITHUB_ACTIONS", "COLUMNS", "LINES", "PYTHONPATH"):
        env.pop(var, None)
    env["PATH"] = f"{TOOL_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(clone / "src")
    return env


def tail(text: str, lines: int = 60) -> str:
    kept = text.splitlines()[-lines:]
    return ("...\n" if len(kept) < len(text.splitlines()) else "") + "\n".join(kept)


def run_shown(shown: Shown, scratch: Scratch) -> tuple[int, str]:
    state = scratch.tmp / ".cwd"
    command = re.sub(r"(?<![\w.])/tmp/", f"{scratch.tmp}/", shown.command)
    script = f"trap 'pwd > \"{state}\"' EXIT\nset -o pipefail\n{command}\n"
    proc = subprocess.run(
        ["bash", "-c", script],
        cwd=scratch.cwd,
        env=scratch.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    if state.is_file():
        scratch.cwd = Path(state.read_text().strip())
    return proc.returncode, proc.stdout


# ---------------------------------------------------------------------------------------------------
# The tests


def _param(doc: str) -> object:
    commands = parse_commands(doc, (REPO / doc).read_text(encoding="utf-8"))
    rules = [RULES.get((doc, c.key)) for c in commands]
    run = [r for r in rules if r is not None and not r.skip]
    marks = [pytest.mark.network] if any(r.network for r in run) else []
    marks += [pytest.mark.slow] if any(r.slow for r in run) else []
    return pytest.param(doc, marks=marks, id=doc)


DOCS_WITH_COMMANDS = [
    d for d in documents(REPO) if parse_commands(d, (REPO / d).read_text(encoding="utf-8"))
]


@pytest.mark.parametrize("doc", [_param(d) for d in DOCS_WITH_COMMANDS])
def test_doc_commands_run_as_shown(doc: str, tmp_path: Path) -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs the repository as a git checkout to clone")
    if not (TOOL_BIN / "hqp").is_file():
        pytest.skip(f"needs the tool's scripts beside {sys.executable} (./hqp installs them)")
    clone = make_clone(tmp_path)
    text = (clone / doc).read_text(encoding="utf-8")
    scratch = Scratch(clone, tmp_path, doc_env(clone), clone)
    failures: list[str] = []
    skipped: list[str] = []
    ran = 0
    for shown in parse_commands(doc, text):
        rule = RULES.get((doc, shown.key), Rule("runs as written"))
        where = f"{doc}:{shown.line}: {shown.key}"
        if rule.skip:
            skipped.append(f"{where}  ({rule.why})")
            continue
        if rule.setup is not None:
            rule.setup(scratch)
        code, out = run_shown(shown, scratch)
        ran += 1
        if code != rule.exit_code:
            failures.append(
                f"{where}\n  exit {code}, expected {rule.exit_code} ({rule.why})\n{tail(out)}"
            )
            continue
        if shown.output is not None and not output_matches(shown.output, out):
            failures.append(
                f"{where}\n  output no longer matches the doc's\n--- shown\n"
                + "\n".join(shown.output)
                + "\n--- printed\n"
                + tail(out)
            )
        if rule.output_in_doc is not None:
            expected = doc_section(text, *rule.output_in_doc)
            if out != expected:
                diff = difflib.unified_diff(
                    expected.splitlines(), out.splitlines(), "doc", "printed", lineterm=""
                )
                failures.append(
                    f"{where}\n  the doc's section after {rule.output_in_doc[0]!r} is not this "
                    "output byte for byte; regenerate it\n" + "\n".join(list(diff)[:40])
                )
        if rule.verify is not None:
            try:
                rule.verify(scratch)
            except AssertionError as exc:
                failures.append(f"{where}\n  {exc}")
    assert not failures, "\n\n".join(failures)
    if not ran:
        pytest.skip("; ".join(skipped))


def test_every_rule_names_a_shown_command() -> None:
    keys = {
        (c.doc, c.key) for d in documents(REPO) for c in parse_commands(d, (REPO / d).read_text())
    }
    assert sorted(set(RULES) - keys) == []


def test_parsing_follows_bash() -> None:
    text = (
        "```console\n"
        "hqp a   # a comment\n"
        "python3 -c \"print('#x')\" '# kept'\n"
        "hqp b \\\n  --c   # more\n"
        "for v in 1 2; do\n  echo $v\ndone\n"
        "```\n"
        "```console\n$ hqp d\n...\nline\n$ hqp e\n```\n"
    )
    got = [(c.command, c.output) for c in parse_commands("x.md", text)]
    assert got == [
        ("hqp a", None),
        ("python3 -c \"print('#x')\" '# kept'", None),
        ("hqp b \\\n  --c", None),
        ("for v in 1 2; do\n  echo $v\ndone", None),
        ("hqp d", ["...", "line"]),
        ("hqp e", []),
    ]


def test_output_matching_rule() -> None:
    printed = (
        "fetching (316 MB in 3.2 s)\nrow x needs you, in /tmp/pytest-1/fork-port:\nthen: done\n"
    )
    assert output_matches(["...", "row x needs you, in /src/fork-port:", "then: ..."], printed)
    assert output_matches(["fetching (316 MB in 1 s)", "...", "then: done"], printed)
    assert not output_matches(["row x needs you, in /src/fork-port:", "then: done"], printed)
    assert not output_matches(["...", "row y needs you, in /src/fork-port:", "..."], printed)
    assert not output_matches(["...", "row x needs you, in /src/other:", "..."], printed)

"""The command line behaves as people expect of one: global options before or after the command,
usage lines that say ``DIR``, every exit code in every ``--help``, hints that name the program as
it was typed.

The incident: ``hqp check -v`` was an error (``-v`` only before the command); ``apply --help``
showed ``Usage: hqp apply [OPTIONS] {DIR}``; exit code 3 was missing from ``check --help`` and
``apply --help``; a paused ``port --rebase`` told a user with only ``./hqp`` to run ``hqp port
--rebase --continue``.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from hyperqwen_patches import cli
from hyperqwen_patches.commands.argv import hoist
from hyperqwen_patches.errors import ExitCode

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src/hyperqwen_patches"


def registered() -> list[str]:
    group = typer.main.get_command(cli.build_app())
    return sorted(group.commands)  # type: ignore[attr-defined]


def help_text(*args: str) -> str:
    result = CliRunner().invoke(cli.build_app(), [*args, "--help"])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", [None, *registered()])
def test_every_help_lists_every_exit_code_and_no_braced_metavar(command: str | None) -> None:
    text = help_text(*([command] if command else []))
    flat = " ".join(text.split())
    codes = flat[flat.index("Exit codes: ") :]
    said = [int(n) for n in re.findall(r"(?:Exit codes: |; )(\d+) ", codes)]
    assert said == [int(c) for c in ExitCode], (command, codes)
    # Metavars: the usage line, the arguments' and the options' columns (help prose may use braces).
    usage = text.splitlines()[0]
    columns = [
        line.split("  ")[1]
        for line in text.splitlines()
        if line.startswith("  ") and "  " in line[2:]
    ]
    assert "{" not in usage and not [c for c in columns if "{" in c], (command, usage, columns)


def test_the_usage_line_says_dir_and_row() -> None:
    assert "Usage: hyperqwen-patches apply [OPTIONS] DIR\n" in help_text("apply")
    # ROW is optional to edit only because `edit --abort` takes none.
    assert "Usage: hyperqwen-patches edit [OPTIONS] [ROW]\n" in help_text("edit")
    assert "Usage: hyperqwen-patches drop [OPTIONS] ROW\n" in help_text("drop")
    assert "Usage: hyperqwen-patches rename [OPTIONS] OLD NEW\n" in help_text("rename")
    assert "Usage: hyperqwen-patches diff [OPTIONS] OLD NEW\n" in help_text("diff")


def test_global_options_are_hoisted_around_the_command() -> None:
    assert hoist(["check", "-v"]) == ["-v", "check"]
    assert hoist(["check", "--json", "--verbose"]) == ["--verbose", "check", "--json"]
    assert hoist(["--json", "apply", "DIR"]) == ["apply", "--json", "DIR"]
    assert hoist(["-v", "--json", "list", "-v"]) == ["-v", "-v", "list", "--json"]
    # An option's value and what follows -- stay put: click reads them as value and argument too.
    line = ["new", "x", "--after", "a", "--what", "-v", "--", "-v"]
    assert hoist(line) == line
    # No --json in the command, or no command known: left for click to answer.
    assert hoist(["--json", "edit", "ROW"]) == ["--json", "edit", "ROW"]
    assert hoist(["nope", "-v"]) == ["nope", "-v"]


def run_main(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, list[bool]]:
    verbose: list[bool] = []
    monkeypatch.setattr(cli, "_log_verbosely", lambda: verbose.append(True))
    monkeypatch.setattr(sys, "argv", ["hqp", *argv])
    try:
        cli.main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().out, verbose


@pytest.mark.parametrize("path", ["fast", "typer"])
@pytest.mark.parametrize(
    "argv",
    [
        ["-v", "list", "--repo", str(REPO), "--json"],
        ["list", "-v", "--repo", str(REPO), "--json"],
        ["list", "--repo", str(REPO), "--json", "--verbose"],
        ["--json", "list", "-v", "--repo", str(REPO)],
    ],
    ids=["before", "after", "last", "json-before"],
)
def test_verbose_and_json_before_or_after_the_command(
    path: str,
    argv: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if path == "typer":  # what the fast path declines goes to Typer: the same answer there
        monkeypatch.setattr("hyperqwen_patches.commands.argv.parse", lambda args: None)
    code, out, verbose = run_main(argv, monkeypatch, capsys)
    assert code == 0 and verbose == [True]
    assert json.loads(out)["pin"]


def test_v_after_the_command_in_a_real_process() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", "list", "--repo", str(REPO), "-v"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "No such option" not in proc.stderr


def test_a_hint_names_the_program_as_invoked(tmp_path: Path) -> None:
    """Run by a path that is not on PATH, the hint says that path; through ./hqp, ./hqp."""
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches/manifest.yaml").write_text(
        "format: 1\npin: '0.29.0'\npackage: vllm\npaths: root\nrows: []\n"
    )
    script = Path(sys.executable).parent / "hqp"
    env = {k: v for k, v in os.environ.items() if k != "HQP_PROG"}
    env["PATH"] = "/usr/bin:/bin"
    proc = subprocess.run(
        [str(script), "refresh", "--repo", str(tmp_path)],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert f"hint: start one: {script} edit ROW" in proc.stderr
    env["HQP_PROG"] = "./hqp"
    proc = subprocess.run(
        [str(script), "check", "--help"], capture_output=True, text=True, env=env, check=False
    )
    assert proc.stdout.startswith("Usage: ./hqp check [OPTIONS]")
    assert "./hqp check --json" in proc.stdout  # the examples too


def test_no_hint_hard_codes_hqp() -> None:
    """Commands a message suggests are written ``hyperqwen-patches CMD``, which
    ``console.as_typed`` spells as the user runs the tool; ``hqp CMD`` in a string would be shown as
    it stands, to users who have no ``hqp``. Docstrings may say hqp."""
    pattern = re.compile(r"(?<![\w./-])hqp (?=-?-?[a-z])")
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = set()
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
                docstrings.add(id(body[0].value))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and pattern.search(node.value)
            ):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value[:60]!r}")
    assert found == []


def test_a_paused_rebase_hint_goes_through_as_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hyperqwen_patches.console import as_typed
    from hyperqwen_patches.errors import GitError
    from hyperqwen_patches.port import pausing

    state = pausing.state_path(tmp_path)
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text("not json")
    with pytest.raises(GitError) as info:
        pausing.load(tmp_path)
    monkeypatch.setenv("HQP_PROG", "./hqp")
    assert as_typed(info.value.hint or "") == "`./hqp port --rebase --abort` drops it"

"""The output consoles print user data as it is: no markup, no highlighting, no emoji codes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table

from hyperqwen_patches import console

# Subjects and row names are user data: a patch subject may well say ":smile:" or ":warning:".
USER_TEXT = "fix :smile: and :warning: in [PATCH 1/3] [bold]x[/bold]"


@pytest.mark.parametrize("which", ["out", "err"])
def test_consoles_print_emoji_codes_as_text(which: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Plain text goes to the stream as it is (the sink does not even import rich for it)."""
    getattr(console, which).print(USER_TEXT)
    captured = capsys.readouterr()
    assert getattr(captured, which) == USER_TEXT + "\n"


@pytest.mark.parametrize("which", ["out", "err"])
def test_the_rich_console_behind_the_sink_prints_emoji_codes_as_text(which: str) -> None:
    sink: Console = getattr(console, which).rich
    with sink.capture() as captured:
        sink.print(USER_TEXT)
    assert captured.get() == USER_TEXT + "\n"


@pytest.mark.parametrize("which", ["out", "err"])
def test_table_cells_keep_emoji_codes(which: str) -> None:
    """Tables (the check report's rows) render cells through the same console settings."""
    sink: Console = getattr(console, which).rich
    table = Table("row")
    table.add_row(":smile:-row")
    with sink.capture() as captured:
        sink.print(table)
    assert ":smile:-row" in captured.get()
    assert "\N{SMILING FACE WITH OPEN MOUTH AND SMILING EYES}" not in captured.get()


def test_a_default_console_would_replace_the_code() -> None:
    """What the settings guard against: rich's default turns the code into the emoji."""
    default = Console(markup=False, highlight=False)
    with default.capture() as captured:
        default.print(":smile:")
    assert captured.get() != ":smile:\n"


def test_off_a_terminal_long_lines_are_not_wrapped(capsys: pytest.CaptureFixture[str]) -> None:
    """CI logs: rich wrapped at 80 columns off a terminal, splitting `file:line: message` lines."""
    line = "patches/0002-x.patch:116: " + "word " * 60
    console.err.print(line)
    assert capsys.readouterr().err == line + "\n"
    assert (
        console.out.rich.width > 10_000
    )  # not a terminal here: the rich side does not wrap either


def test_hints_name_the_command_as_the_user_runs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from hyperqwen_patches.console import as_typed

    text = "does not exist (run: hyperqwen-patches render); hyperqwen-patches 0.1.0 by hyperqwen-patches <pristine@hyperqwen-patches.invalid>"
    monkeypatch.setenv("HQP_PROG", "./hqp")
    assert as_typed(text) == text.replace("run: hyperqwen-patches render", "run: ./hqp render")
    monkeypatch.delenv("HQP_PROG")
    monkeypatch.setattr("sys.argv", ["/somewhere/not/on/path/hqp", "check"])
    assert "run: /somewhere/not/on/path/hqp render" in as_typed(text)
    monkeypatch.setattr("sys.argv", ["/x/hyperqwen_patches/__main__.py"])
    assert "run: python -m hyperqwen_patches render" in as_typed(text)


def test_an_error_hint_from_the_quick_start_wrapper_says_hqp(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "patches").mkdir()
    (tmp_path / "patches/manifest.yaml").write_text(
        "format: 1\npin: '0.29.0'\npackage: vllm\npaths: root\nrows: []\n"
    )
    env = {**os.environ, "HQP_PROG": "./hqp"}
    proc = subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", "refresh", "--repo", str(tmp_path)],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "hint: start one: ./hqp edit ROW" in proc.stderr

"""The output consoles print user data as it is: no markup, no highlighting, no emoji codes."""

from __future__ import annotations

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

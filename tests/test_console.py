"""The output consoles print user data as it is: no markup, no highlighting, no emoji codes."""

from __future__ import annotations

import pytest
from rich.console import Console
from rich.table import Table

from hyperqwen_patches import console

# Subjects and row names are user data: a patch subject may well say ":smile:" or ":warning:".
USER_TEXT = "fix :smile: and :warning: in [PATCH 1/3] [bold]x[/bold]"


@pytest.mark.parametrize("which", ["out", "err"])
def test_consoles_print_emoji_codes_as_text(which: str) -> None:
    sink: Console = getattr(console, which)
    with sink.capture() as captured:
        sink.print(USER_TEXT)
    assert captured.get() == USER_TEXT + "\n"


@pytest.mark.parametrize("which", ["out", "err"])
def test_table_cells_keep_emoji_codes(which: str) -> None:
    """Tables (the check report's rows) render cells through the same console settings."""
    sink: Console = getattr(console, which)
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

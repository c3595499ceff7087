"""check's table is formatted as plain text in rich's look (rich's Table took 0.44 s for 1,000 rows)."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from hyperqwen_patches.commands.check import COLUMNS, table_lines


def rich_lines(rows: list[tuple[str, ...]]) -> list[str]:
    """What rich's Table(show_edge=False) prints for the same rows, on a wide plain console."""
    console = Console(
        file=io.StringIO(), width=400, markup=False, highlight=False, color_system=None
    )
    table = Table(show_edge=False)
    for name, justify in COLUMNS:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*row)
    console.print(table)
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue().splitlines()


def test_table_lines_look_like_richs_table() -> None:
    rows = [
        ("memory-profile-after-warmup", "1", "1", "1", "0", "exact"),
        ("kvarn-modules", "12", "12", "12", "0", "exact"),
        ("a-much-longer-row-name-than-the-others", "123", "4567", "4500", "67", "offset"),
        ("skipped-row", "0", "0", "0", "0", "skipped"),
    ]
    assert table_lines(rows) == rich_lines(rows)


def test_table_lines_with_headers_wider_than_cells() -> None:
    rows = [("r", "1", "2", "3", "4", "ok")]
    assert table_lines(rows) == rich_lines(rows)

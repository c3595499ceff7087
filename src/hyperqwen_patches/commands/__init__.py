"""One module per command; each exposes ``register(app)``.

To add a command: create ``commands/<name>.py`` with ``def register(app: typer.Typer) -> None`` and add
its module name to ``COMMANDS`` (the order here is the order in ``--help``).
"""

from __future__ import annotations

import importlib

import typer

COMMANDS: list[str] = [
    "check",
    "apply",
    "status",
    "list_",
    "adopt",
    "render",
    "export",
    "import_",
    "diff",
    "port",
    "statics",
]


def register_all(app: typer.Typer) -> None:
    for name in COMMANDS:
        importlib.import_module(f"hyperqwen_patches.commands.{name}").register(app)

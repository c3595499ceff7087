"""One module per command; each exposes ``register(app)``.

To add a command: create ``commands/<name>.py`` with ``def register(app: typer.Typer) -> None`` and add
its module name to ``COMMANDS`` (the order here is the order in ``--help``), then regenerate the option
table (``commands/argtable.py``; ``tests/test_argv.py`` says how when it is stale).

A command module imports Typer only under ``TYPE_CHECKING``: its signatures (``Annotated[...,
typer.Option(...)]``) are strings until Typer reads them at registration, and :func:`register` gives the
module the name then. So a command run through the fast path (``commands/argv.py``) never imports
Typer, and no command imports another command's module.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing's: a plain run never imports typing (a few ms of every start)
if TYPE_CHECKING:
    import typer


COMMANDS: list[str] = [
    "check",
    "apply",
    "status",
    "list_",
    "rows",
    "adopt",
    "render",
    "export",
    "import_",
    "diff",
    "port",
    "statics",
    "cache",
]


def register(app: typer.Typer, only: str | None = None) -> None:
    """Register every command, or only the module that defines the command named ``only``.

    Typer builds its click tree from every registered signature on every run (about a fifth of its
    start-up with all of them), so a run that names its command registers that one alone; ``--help``
    and unknown names register all.
    """
    from typing import Annotated, Any

    import typer

    from hyperqwen_patches.commands.argtable import TABLE

    modules = COMMANDS
    if only is not None and only in TABLE:
        modules = [TABLE[only]["module"].rpartition(".")[2]]
    for name in modules:
        module = importlib.import_module(f"hyperqwen_patches.commands.{name}")
        module.typer = typer  # type: ignore[attr-defined]  # the name the signature strings use
        # typing's names the signatures use, for modules that import typing for checkers only
        module.__dict__.setdefault("Annotated", Annotated)
        module.__dict__.setdefault("Any", Any)
        module.register(app)

"""The fast path: read a command line with the option table alone and call the command without Typer.

Typer and click cost 60-75 ms to import on the project's 2-core machines, more than the whole of an
``apply`` of a 50-row series. Most command lines are plain (a command, its options, its arguments), so
:func:`parse` reads them from ``commands/argtable.py`` (generated from the Typer app, checked against it
by ``tests/test_argv.py``) and the command function is called directly, with the values Typer would
have passed.

The rule that keeps this safe: the fast path only ever accepts what Typer accepts, with the same values.
Anything it is not sure of (help, an unknown or short option, a missing value, a value that might not
convert, a path that fails a check, a missing required argument) returns ``None`` and the run goes
through Typer, which gives the usual error or help. ``tests/test_argv.py`` compares the two parsers on
generated command lines.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from hyperqwen_patches.records import field, record

TYPE_CHECKING = False  # not typing's: a plain run never imports typing (a few ms of every start)
if TYPE_CHECKING:
    from typing import Any


ROOT_VERBOSE = ("-v", "--verbose")


@record(frozen=True)
class Call:
    """A parsed command line: which function to call, with which keyword arguments."""

    command: str
    module: str
    function: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    verbose: bool = False

    def run(self) -> None:
        import importlib

        getattr(importlib.import_module(self.module), self.function)(**self.kwargs)


def hoist(args: list[str]) -> list[str]:
    """The command line with its global options where both parsers read them: ``-v``/``--verbose``
    before the command, ``--json`` after it (where the command has one), so ``check -v`` and
    ``--json check`` mean what ``-v check`` and ``check --json`` do.

    A word that is an option's value (``--what -v``), or follows ``--``, stays where it is: click
    reads it as that value or argument too. A command line naming no known command is left as is.
    """
    from hyperqwen_patches.commands.argtable import TABLE

    i = 0
    verbose: list[str] = []
    json_before: list[str] = []
    while i < len(args) and args[i] in (*ROOT_VERBOSE, "--json"):
        (verbose if args[i] in ROOT_VERBOSE else json_before).append(args[i])
        i += 1
    if i == len(args) or args[i] not in TABLE:
        return args
    takes_value: set[str] = set()
    own: set[str] = set()
    for param in TABLE[args[i]]["params"]:
        own.update(param["opts"], param["secondary"])
        if not param["flag"]:
            takes_value.update(param["opts"])
    if json_before and "--json" not in own:
        return args  # click says --json is no option here (a --json caller still gets a document)
    rest: list[str] = []
    j = i + 1
    while j < len(args):
        arg = args[j]
        j += 1
        if arg == "--":
            rest += args[j - 1 :]
            break
        if arg in ROOT_VERBOSE and arg not in own:
            verbose.append(arg)
            continue
        rest.append(arg)
        if arg in takes_value and j < len(args):
            rest.append(args[j])
            j += 1
    return [*verbose, args[i], *json_before, *rest]


def command_name(args: list[str]) -> str | None:
    """The command a command line names (the first word after the root options), if any."""
    for arg in args:
        if not arg.startswith("-"):
            return arg
        if arg not in (*ROOT_VERBOSE, "--version"):
            return None
    return None


def parse(args: list[str]) -> Call | None:
    """The call this command line makes, or None where Typer must read it (see the module docstring)."""
    from hyperqwen_patches.commands.argtable import TABLE

    verbose = False
    i = 0
    while i < len(args) and args[i] in ROOT_VERBOSE:
        verbose = True
        i += 1
    if i == len(args) or args[i] not in TABLE:
        return None
    spec = TABLE[args[i]]
    rest = args[i + 1 :]
    if not rest and spec["no_args_is_help"]:
        return None
    options: dict[str, dict[str, Any]] = {}
    for param in spec["params"]:
        for opt in (*param["opts"], *param["secondary"]):
            options[opt] = param
    arguments = [p for p in spec["params"] if p["kind"] == "argument"]
    raw: dict[str, Any] = {}
    positional: list[str] = []
    j = 0
    only_positional = False
    while j < len(rest):
        arg = rest[j]
        j += 1
        if only_positional or arg == "-" or not arg.startswith("-"):
            positional.append(arg)
            continue
        if arg == "--":
            only_positional = True
            continue
        name, eq, value = arg.partition("=")
        param = options.get(name) if name.startswith("--") else None
        if param is None:
            return None  # -h, --help, a short or unknown option: Typer answers
        if param["flag"]:
            if eq:
                return None
            raw[param["name"]] = name not in param["secondary"]
            continue
        if not eq:
            if j == len(rest) or rest[j].startswith("-"):
                return None  # click would take the next word as the value; not worth guessing
            value = rest[j]
            j += 1
        if param["multiple"]:
            raw.setdefault(param["name"], []).append(value)
        else:
            raw[param["name"]] = value
    if len(positional) != len(arguments):
        return None
    for param, value in zip(arguments, positional, strict=True):
        raw[param["name"]] = value
    kwargs: dict[str, Any] = {}
    for param in spec["params"]:
        name = param["name"]
        if name not in raw:
            if param["required"]:
                return None
            continue  # the function's own default: the value Typer passes too
        values = raw[name] if param["multiple"] else [raw[name]]
        converted = [_convert(param, v) for v in values]
        if any(v is _REFUSED for v in converted):
            return None
        kwargs[name] = converted if param["multiple"] else converted[0]
    return Call(args[i], spec["module"], spec["function"], kwargs, verbose)


_REFUSED = object()


def _convert(param: dict[str, Any], value: Any) -> Any:
    kind = param["type"]
    if kind == "bool":
        return value
    if not value.isprintable():
        return _REFUSED  # control characters, undecodable bytes (surrogates): Typer decides
    if kind == "str":
        return value
    if kind == "int":
        if not (value.isascii() and value.isdigit()):
            return _REFUSED
        number = int(value)
        low, high = param.get("min"), param.get("max")
        if (low is not None and number < low) or (high is not None and number > high):
            return _REFUSED
        return number
    if kind == "path":
        return _path(param, value)
    return _REFUSED


def _path(param: dict[str, Any], value: str) -> Any:
    """A path as click's ``Path`` type checks it (exists=False): only an existing path is checked."""
    try:
        st = os.stat(value)
    except OSError:
        return _REFUSED if param["exists"] else Path(value)
    if not param["file_okay"] and stat.S_ISREG(st.st_mode):
        return _REFUSED
    if not param["dir_okay"] and stat.S_ISDIR(st.st_mode):
        return _REFUSED
    if param["readable"] and not os.access(value, os.R_OK):
        return _REFUSED
    return Path(value)

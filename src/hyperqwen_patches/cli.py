"""The command-line entry: a thin Typer layer, and a fast path in front of it.

Each command lives in ``commands/<name>.py`` as a function that parses options, calls one operation and
renders its result object. This module builds the Typer app (registering only the command a run names),
maps typed errors to exit codes in one place, and generates the option table the fast path reads
(``commands/argv.py``): a plain command line is served without importing Typer at all.

Exit codes (every command): 0 ok; 1 a finding (a check failed, a hunk did not apply); 2 usage, input or
environment problem; 3 git failed; 130 interrupted (Ctrl-C); 143 terminated (SIGTERM).
"""

from __future__ import annotations

import sys

from hyperqwen_patches import __version__

# Not typing.TYPE_CHECKING: importing typing costs 14 ms, most of what `--version` may take.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

    import typer

HELP = (
    "Carry a patch series on a pinned upstream release (vLLM): apply at fuzz 0, check replay "
    "identity against the fork, export, import, render the ledger, port to a new release."
)
ARGTABLE = "commands/argtable.py"


def build_app(only: str | None = None, *, prog: str | None = None) -> typer.Typer:
    """The Typer app with every command registered, or only the one named ``only`` (see commands).

    ``prog`` is the name the user ran us by (``console.program()``): usage lines and the examples
    in each --help then read as they would be typed (``./hqp check``), as hints do.
    """
    import typer
    import typer.core

    from hyperqwen_patches.commands import register
    from hyperqwen_patches.errors import exit_codes_help

    class Command(typer.core.TyperCommand):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if prog is not None:
                from hyperqwen_patches.console import as_typed

                self.help = as_typed(self.help) if self.help else self.help
                self.epilog = as_typed(self.epilog) if self.epilog else self.epilog

        def collect_usage_pieces(self, ctx: Any) -> list[str]:
            # Typer 0.28 writes a required argument as {DIR}; the usage line says DIR, as click
            # and the docs do.
            pieces = [self.options_metavar] if self.options_metavar else []
            for param in self.get_params(ctx):
                if param.param_type_name != "argument":
                    pieces += param.get_usage_pieces(ctx)
                    continue
                name = param.metavar or (param.name or "").upper()
                name += "..." if param.nargs != 1 else ""
                pieces.append(name if param.required else f"[{name}]")
            return pieces

    class App(typer.Typer):
        def command(self, *args: Any, cls: Any = None, **kwargs: Any) -> Any:
            return super().command(*args, cls=cls or Command, **kwargs)

    app = App(
        name="hyperqwen-patches",
        help=HELP,
        epilog=exit_codes_help(),
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
        rich_markup_mode=None,
    )

    def _version(value: bool) -> None:
        if value:
            typer.echo(f"hyperqwen-patches {__version__}")
            raise typer.Exit()

    @app.callback()
    def _root(
        version: bool = typer.Option(
            False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
        verbose: bool = typer.Option(
            False,
            "--verbose",
            "-v",
            help="Log git commands and cache steps to stderr (before or after the command).",
        ),
    ) -> None:
        if verbose:
            _log_verbosely()

    register(app, only)
    return app


def __getattr__(name: str) -> Any:
    # ``from hyperqwen_patches.cli import app`` (CliRunner tests) still gets the whole app.
    if name == "app":
        return build_app()
    raise AttributeError(name)


def _log_verbosely() -> None:
    # logging costs 10 ms to import; gitrun and pristine log at debug level only
    import logging

    logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s", stream=sys.stderr)


def main() -> None:
    """Console-script entry (see :func:`_main`). A SIGTERM that lands once the run's own handling is
    over (while an error is reported, or as the run returns) ends it as a terminated run too: 143 and
    one line, never a traceback; the handler is gone when the process leaves."""
    try:
        _main()
    except BaseException as exc:
        from hyperqwen_patches.errors import ExitCode, Terminated

        if not isinstance(exc, Terminated):
            raise
        _fail(ExitCode.TERMINATED, "terminated (SIGTERM)", None, prefix="")
    finally:
        _default_sigterm()


def _main() -> None:
    """Run the command and map typed errors to one line and an exit code.

    ``--version`` and plain command lines (``commands/argv.py``) never import Typer; the rest go to
    the Typer app in standalone mode, where click turns usage errors into exit 2 and ``typer.Exit(n)``
    into exit n. Only our own typed errors are mapped here, for both paths alike. SIGTERM ends a run
    as Ctrl-C does (context managers unwind, a ``--json`` caller gets its document), with 143.
    """
    args = sys.argv[1:]
    if args == ["--version"]:
        print(f"hyperqwen-patches {__version__}")
        return
    import os

    from hyperqwen_patches.commands.argv import command_name, hoist, parse
    from hyperqwen_patches.errors import ExitCode, HqpError, Terminated

    # A shell asking for completions (Typer's _<PROG>_COMPLETE protocol) is answered by Typer,
    # with every command registered.
    completing = any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ)
    try:
        _terminate_on_sigterm()
        if completing:
            build_app()()
            return
        args = hoist(args)
        call = parse(args)
        if call is None:
            from hyperqwen_patches.console import program

            prog = program()
            try:
                build_app(only=command_name(args), prog=prog)(args=args, prog_name=prog)
            except SystemExit as exc:
                # click's usage errors exit 2 after printing usage; a --json caller still gets its
                # one document. Typer turns Ctrl-C into a silent exit 130: said here, as below.
                if exc.code == 2:
                    _json_error(2, "usage error: see the message on stderr", None)
                elif exc.code == ExitCode.INTERRUPTED:
                    _fail(ExitCode.INTERRUPTED, "interrupted (SIGINT)", None, prefix="")
                raise
            return
        if call.verbose:
            _log_verbosely()
        call.run()
    except HqpError as exc:
        _annotate(exc)
        _fail(exc.exit_code, exc.message, exc.hint, exc.json_fields())
    except KeyboardInterrupt:
        _fail(ExitCode.INTERRUPTED, "interrupted (SIGINT)", None, prefix="")
    except Terminated:
        _fail(ExitCode.TERMINATED, "terminated (SIGTERM)", None, prefix="")
    except BrokenPipeError:
        # The reader went away (``| head``): as click does, stop quietly with exit 1.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except OSError as exc:
        # The last net: an operating-system error no typed error named (a cache directory that is a
        # file or read-only, a full disk) is one line and exit 2, never a traceback.
        from hyperqwen_patches.cachedir import cache_dir

        where = f": {exc.filename}" if exc.filename else ""
        root = cache_dir()
        hint = None
        if exc.filename and str(exc.filename).startswith(str(root)):
            hint = (
                f"the cache is {root} ($HQP_CACHE): it must be a writable directory; "
                "point HQP_CACHE elsewhere or fix its permissions"
            )
        _fail(ExitCode.USAGE, f"{exc.strerror or exc}{where}", hint)


def _annotate(exc: Exception) -> None:
    """In a GitHub workflow, an error that names places (a manifest's problems, each with its file
    and line) is an annotation on each place as well."""
    problems = getattr(exc, "problems", None)
    if not problems:
        return
    from hyperqwen_patches.commands import annotate
    from hyperqwen_patches.console import err

    if annotate.wanted():
        for line in annotate.for_problems(problems):
            err.print(line, soft_wrap=True)


def _terminate_on_sigterm() -> None:
    """SIGTERM (``timeout``, ``docker stop``, a CI runner cancelling a job) raises ``Terminated`` in
    the main thread, so the run unwinds like Ctrl-C instead of vanishing with nothing on stdout. A
    SIGTERM its parent set to be ignored stays ignored (as Python does for SIGINT)."""
    import signal

    from hyperqwen_patches.errors import Terminated

    def raise_terminated(_signum: int, _frame: object) -> None:
        raise Terminated

    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, raise_terminated)
        _SIGTERM_SET.append(raise_terminated)


_SIGTERM_SET: list[object] = []  # the handler this process set, if it did (to take back on exit)


def _default_sigterm() -> None:
    """The default SIGTERM action back, where :func:`_terminate_on_sigterm` set ours: a signal after
    this point ends the process as the kernel would (the run's work is over by then)."""
    import signal

    while _SIGTERM_SET:
        if signal.getsignal(signal.SIGTERM) is _SIGTERM_SET.pop():
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _fail(
    code: int,
    message: str,
    hint: str | None,
    fields: dict[str, object] | None = None,
    *,
    prefix: str = "error: ",
) -> NoReturn:
    """Say what went wrong once, and exit with ``code``.

    A ``--json`` caller whose document is already out reads the outcome there (``ok``,
    ``exit_code``, the findings): stderr gets no second account of it. Otherwise stderr gets the
    line and its hint, and a ``--json`` caller also the error document.
    """
    from hyperqwen_patches.console import as_typed, err, json_emitted

    if not (_json_wanted() and json_emitted()):
        err.print(f"{prefix}{as_typed(message)}")
        if hint:
            err.print(f"hint: {as_typed(hint)}")
    _json_error(int(code), message, hint, fields)
    sys.exit(int(code))


def _json_wanted() -> bool:
    args = sys.argv[1:]
    return "--json" in (args[: args.index("--")] if "--" in args else args)


def _json_error(
    code: int, message: str, hint: str | None, fields: dict[str, object] | None = None
) -> None:
    """A ``--json`` caller that got no document (the error came first) gets one describing it, so a
    script always has JSON to parse; one that got its document is not given a second."""
    from hyperqwen_patches.console import emit_json, json_emitted

    if _json_wanted() and not json_emitted():
        emit_json(
            {**(fields or {}), "ok": False, "exit_code": code, "error": message, "hint": hint}
        )


# --- the fast path's option table -------------------------------------------------------------------


def argtable() -> dict[str, dict[str, Any]]:
    """Every command's parameters as the Typer app defines them, in the form ``commands/argv.py`` reads.

    A command whose function is not called with exactly its click parameters (a ``typer.Context``
    argument, say) is left out: it always goes through Typer.
    """
    import inspect

    import typer.main

    group: Any = typer.main.get_command(build_app())
    table: dict[str, dict[str, Any]] = {}
    for name, command in group.commands.items():
        function = inspect.unwrap(command.callback)  # type: ignore[arg-type]
        if list(inspect.signature(function).parameters) != [p.name for p in command.params]:
            continue
        params = [_param_spec(p) for p in command.params]
        if any(p is None for p in params):
            continue
        table[name] = {
            "module": function.__module__,
            "function": function.__qualname__,
            "no_args_is_help": bool(getattr(command, "no_args_is_help", False)),
            "params": params,
        }
    return table


def _param_spec(param: Any) -> dict[str, Any] | None:
    """One parameter, or None for a kind the fast path does not read. Types are told by their click
    names (Typer 0.12-0.28 ship click under different module names)."""
    t = param.type
    spec: dict[str, Any] = {
        "name": param.name,
        "kind": param.param_type_name,
        "opts": [o for o in param.opts if o.startswith("-")],
        "secondary": list(param.secondary_opts),
        "flag": bool(getattr(param, "is_flag", False)),
        "multiple": bool(param.multiple),
        "required": bool(param.required),
    }
    if param.nargs != 1 or param.callback is not None or param.envvar:
        return None
    if hasattr(t, "file_okay"):  # click.Path (named "path", "file" or "directory")
        if t.writable or t.resolve_path or t.allow_dash:
            return None
        spec.update(type="path", exists=t.exists, file_okay=t.file_okay, dir_okay=t.dir_okay,
                    readable=t.readable)  # fmt: skip
    elif t.name in ("integer", "integer range", "int", "int range"):
        if (
            getattr(t, "min_open", False)
            or getattr(t, "max_open", False)
            or getattr(t, "clamp", False)
        ):
            return None
        spec.update(type="int", min=getattr(t, "min", None), max=getattr(t, "max", None))
    elif t.name in ("boolean", "bool", "text", "str"):
        spec["type"] = "bool" if t.name in ("boolean", "bool") else "str"
    else:
        return None
    return spec


def argtable_source() -> str:
    """The text of ``commands/argtable.py`` for the current commands (one parameter a line)."""
    import json

    def literal(value: Any) -> str:  # JSON's spelling of these values, made Python's
        return (
            json.dumps(value)
            .replace("null", "None")
            .replace("false", "False")
            .replace("true", "True")
        )

    lines = [
        '"""Generated from the Typer app by ``hyperqwen_patches.cli.write_argtable()``: do not edit.',
        "",
        "The fast path (``commands/argv.py``) reads command lines with it; ``tests/test_argv.py`` fails",
        'when it no longer matches the commands."""',
        "",
        "from __future__ import annotations",
        "",
        "TYPE_CHECKING = False  # typing itself is not imported by a plain run",
        "if TYPE_CHECKING:",
        "    from typing import Any",
        "",
        "# fmt: off",
        "TABLE: dict[str, dict[str, Any]] = {",
    ]
    for name, spec in argtable().items():
        lines.append(f"    {literal(name)}: {{")
        for key in ("module", "function", "no_args_is_help"):
            lines.append(f"        {literal(key)}: {literal(spec[key])},")
        lines.append('        "params": [')
        lines += [f"            {literal(param)}," for param in spec["params"]]
        lines += ["        ],", "    },"]
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_argtable() -> None:
    from pathlib import Path

    (Path(__file__).parent / ARGTABLE).write_text(argtable_source(), encoding="utf-8")

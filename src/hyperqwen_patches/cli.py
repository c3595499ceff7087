"""The command-line entry: a thin Typer layer.

Each command lives in ``commands/<name>.py`` as a function that parses options, calls one operation and
renders its result object. This module only registers them and maps typed errors to exit codes, in one
place.

Exit codes (every command): 0 ok; 1 a finding (a check failed, a hunk did not apply); 2 usage, input or
environment problem; 3 git failed; 130 interrupted.
"""

from __future__ import annotations

import sys

import typer

from hyperqwen_patches import __version__
from hyperqwen_patches.errors import ExitCode, HqpError

EPILOG = (
    "Exit codes: 0 ok; 1 a finding (a check failed, a hunk did not apply); "
    "2 usage, input or environment problem; 3 git failed; 130 interrupted (what apply was writing "
    "was put back)."
)

app = typer.Typer(
    name="hyperqwen-patches",
    help=(
        "Carry a patch series on a pinned upstream release (vLLM): apply at fuzz 0, check replay "
        "identity against the fork, export, import, render the ledger, port to a new release."
    ),
    epilog=EPILOG,
    no_args_is_help=True,
    add_completion=False,
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
        False, "--verbose", "-v", help="Log git commands and cache steps to stderr."
    ),
) -> None:
    if verbose:  # logging costs 10 ms to import; gitrun and pristine log at debug level only
        import logging

        logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s", stream=sys.stderr)


# Commands register themselves here, one line each (heavy imports stay inside the command bodies).
from hyperqwen_patches.commands import register_all  # noqa: E402

register_all(app)


def main() -> None:
    """Console-script entry: run the app and map typed errors to one line and an exit code.

    Standalone mode lets click turn usage errors into exit 2 and ``typer.Exit(n)`` into exit n; only our
    own typed errors are mapped here.
    """
    from hyperqwen_patches.console import err

    try:
        app()
    except HqpError as exc:
        err.print(f"error: {exc.message}")
        if exc.hint:
            err.print(f"hint: {exc.hint}")
        _json_error(int(exc.exit_code), exc.message, exc.hint)
        sys.exit(int(exc.exit_code))
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except OSError as exc:
        # The last net: an operating-system error no typed error named (a cache directory that is a
        # file or read-only, a full disk) is one line and exit 2, never a traceback.
        from hyperqwen_patches.cachedir import cache_dir

        where = f": {exc.filename}" if exc.filename else ""
        err.print(f"error: {exc.strerror or exc}{where}")
        root = cache_dir()
        if exc.filename and str(exc.filename).startswith(str(root)):
            err.print(
                f"hint: the cache is {root} ($HQP_CACHE): it must be a writable directory; "
                "point HQP_CACHE elsewhere or fix its permissions"
            )
        _json_error(int(ExitCode.USAGE), f"{exc.strerror or exc}{where}", None)
        sys.exit(int(ExitCode.USAGE))


def _json_error(code: int, message: str, hint: str | None) -> None:
    """A ``--json`` caller that got no document (the error came first) gets one describing it, so a
    script always has JSON to parse; one that got its document is not given a second."""
    from hyperqwen_patches.console import emit_json, json_emitted

    args = sys.argv[1:]
    wanted = "--json" in (args[: args.index("--")] if "--" in args else args)
    if wanted and not json_emitted():
        emit_json({"ok": False, "exit_code": code, "error": message, "hint": hint})

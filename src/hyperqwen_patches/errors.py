"""Typed errors and the exit codes they map to.

Core code raises these; only the CLI entry (``cli.main``) turns them into a message and an exit code,
so library callers and tests never see ``SystemExit``.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes shared by every command (documented in README and each ``--help``)."""

    OK = 0  # everything checked holds / the work was done
    FINDING = 1  # a check failed, a hunk did not apply: the input is wrong, the tool worked
    USAGE = 2  # bad options or arguments, unreadable or invalid input files, environment problems
    GIT = 3  # git (or another external tool) failed or a repository is unusable
    INTERRUPTED = 130  # Ctrl-C (SIGINT); what was being written was put back (the shell's 128 + 2)
    TERMINATED = 143  # SIGTERM (``timeout``, ``docker stop``); the same, and the shell's 128 + 15


# What each code means for every command; a command's --help says what it means there, where more
# can be said (see :func:`exit_codes_help`).
MEANINGS: dict[int, str] = {
    ExitCode.OK: "ok",
    ExitCode.FINDING: "a finding (a check failed, a hunk did not apply)",
    ExitCode.USAGE: "a usage, input or environment problem",
    ExitCode.GIT: "git failed or a repository is unusable",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
    ExitCode.TERMINATED: "terminated (SIGTERM)",
}


def exit_codes_help(**meanings: str) -> str:
    """The "Exit codes:" paragraph of a command's --help: every code, the command's own wording
    where it gives one (``exit_codes_help(ok="written", finding="...")``, by ExitCode name in lower
    case), the shared meaning otherwise. Every --help lists them all, so a script's author reads
    the whole contract where the command is described."""
    unknown = set(meanings) - {c.name.lower() for c in ExitCode}
    if unknown:
        raise ValueError(f"not exit codes: {sorted(unknown)}")
    parts = [f"{int(c)} {meanings.get(c.name.lower(), MEANINGS[c])}" for c in ExitCode]
    return "Exit codes: " + "; ".join(parts) + "."


class HqpError(Exception):
    """Base class: a one-line message, an optional hint, and the exit code it maps to."""

    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def json_fields(self) -> dict[str, object]:
        """Keys the ``--json`` error document carries besides ok, exit_code, error and hint
        (``error.schema.json`` lists them): the records a script needs that the message only tells."""
        return {}


class UsageError(HqpError):
    """Bad options, arguments or input files."""


class EnvironmentProblem(HqpError):
    """Something outside the inputs is missing: a registry, a cache, a tool."""


class GitError(HqpError):
    """A git command failed."""

    exit_code = ExitCode.GIT


class FindingError(HqpError):
    """The inputs are well-formed but a check or an application failed."""

    exit_code = ExitCode.FINDING


class Interrupted(HqpError):
    """A signal stopped the work; the message says what state the files were left in."""

    exit_code = ExitCode.INTERRUPTED

    def __init__(self, message: str, *, hint: str | None = None, signal: str = "SIGINT") -> None:
        super().__init__(message, hint=hint)
        # SIGTERM is the shell's 128 + 15, as outside a write (cli.main); SIGINT and SIGHUP keep 130.
        self.exit_code = ExitCode.TERMINATED if signal == "SIGTERM" else ExitCode.INTERRUPTED


class Terminated(BaseException):
    """SIGTERM outside a write (``cli.main`` installs the handler): a BaseException, as
    KeyboardInterrupt is, so that no ``except Exception`` swallows it on the way out."""

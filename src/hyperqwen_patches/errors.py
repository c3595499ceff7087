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
    INTERRUPTED = (
        130  # Ctrl-C or SIGTERM; what was being written was put back (the shell's 128 + 2)
    )


class HqpError(Exception):
    """Base class: a one-line message, an optional hint, and the exit code it maps to."""

    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


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

"""The one git runner: every git command of the tool goes through :func:`run`.

Why one runner (b4's ``git_run_command``): git's output depends on configuration from four places (the
system file, the user's global file, the repository's ``.git/config``, and ``GIT_CONFIG_*`` variables in
the environment) and on repository-locating variables a git hook may have left behind. A patch file or a
commit SHA that depends on any of them is not reproducible. So every call here

- runs with the system and global files switched off (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``)
  and the environment's ``GIT_CONFIG_COUNT``/``GIT_CONFIG_PARAMETERS`` emptied;
- names its repository explicitly (``GIT_DIR``) and never relies on the current directory: ``cwd`` is
  passed to the child, the process never ``chdir``\\ s;
- pins, with ``-c``, every knob that changes what the commands used by this tool print or write, because
  a repository-local ``.git/config`` is still read and environment isolation cannot switch it off
  (command-specific pins, such as ``git format-patch``'s, live beside the command in ``fork/formatpatch.py``);
- returns ``(code, stdout bytes, stderr bytes)`` untouched (never decoded, never stripped: either would
  break byte identity). It calls ``subprocess`` directly rather than GitPython's ``Git.execute``:
  importing GitPython cost 0.2 s of every command's start (more than the checks themselves,
  docs/performance.md), and the runner used nothing of it but ``execute``;
- logs its argv at debug level (``hqp -v`` shows every git command).
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO

from hyperqwen_patches.display import show
from hyperqwen_patches.errors import EnvironmentProblem, GitError
from hyperqwen_patches.records import record

log = logging.getLogger(__name__)

# Knobs pinned on every call. Each closes a leak observed or documented for the commands this tool runs
# (cat-file, ls-tree, diff-tree, rev-list, rev-parse, fast-import, update-index, write-tree, commit-tree,
# update-ref, mailinfo, apply, fetch, bundle, format-patch). A repository-local config can set any of them.
PINNED_CONFIG: tuple[tuple[str, str], ...] = (
    # Attributes from the user's XDG file (core.attributesFile defaults to ~/.config/git/attributes even
    # with GIT_CONFIG_GLOBAL=/dev/null) change diff drivers, funcname lines and binary detection.
    ("core.attributesFile", "/dev/null"),
    # No hooks: a repository's hooks (post-commit, reference-transaction) must not run or write.
    ("core.hooksPath", "/dev/null"),
    # No line-ending or whitespace conversion: patch content is bytes end to end (CRLF, Latin-1).
    ("core.autocrlf", "false"),
    ("core.safecrlf", "false"),
    # Paths are quoted the same way everywhere (we parse NUL-separated output where paths matter).
    ("core.quotePath", "true"),
    # Abbreviated hashes would grow with the object store's size; full hashes are machine-independent.
    ("core.abbrev", "40"),
    # No filesystem monitor or untracked cache: they write into .git on read-only commands.
    ("core.fsmonitor", "false"),
    ("core.untrackedCache", "false"),
    # Commit messages are stored and printed as UTF-8 whatever the user's i18n settings say.
    ("i18n.commitEncoding", "UTF-8"),
    ("i18n.logOutputEncoding", "UTF-8"),
    # commit-tree honours commit.gpgSign: a signature would make commit SHAs depend on the user's key.
    ("commit.gpgSign", "false"),
    ("log.showSignature", "false"),
    # No colour, no pager: output is data.
    ("color.ui", "false"),
    ("core.pager", "cat"),
    # No automatic gc / maintenance / commit-graph writes into a repository we only meant to read or to
    # add objects to.
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("fetch.writeCommitGraph", "false"),
    ("core.commitGraph", "false"),
    # Replace refs and grafts rewrite what a commit looks like; we want the objects as stored.
    ("core.useReplaceRefs", "false"),
    # mailinfo: never cut a message at a "-- >8 --" scissors line the maintainer wrote.
    ("mailinfo.scissors", "false"),
    # fetch/bundle: no prompting, no submodule recursion.
    ("fetch.recurseSubmodules", "false"),
    ("submodule.recurse", "false"),
)

# Variables that would point git at another repository, index or object store than the one we name.
# GIT_DIR and GIT_INDEX_FILE are always set explicitly; these others are neutralised when present.
_LOCATION_VARS = (
    "GIT_WORK_TREE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_QUARANTINE_PATH",
    "GIT_SHALLOW_FILE",
    "GIT_GRAFT_FILE",
    "GIT_REPLACE_REF_BASE",
)

# An index path that cannot exist: commands that must not touch any index read it as empty and fail if
# they try to write it, instead of silently using the user's .git/index.
NO_INDEX = "/nonexistent/hyperqwen-patches/no-index"


@record(frozen=True)
class GitResult:
    """What a git command returned: exit code and raw output bytes."""

    code: int
    stdout: bytes
    stderr: bytes

    @property
    def ok(self) -> bool:
        return self.code == 0


def isolated_env(
    git_dir: Path | None, *, index: Path | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment overrides applied to every git call (exposed for tests)."""
    env: dict[str, str] = {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_COUNT": "0",
        "GIT_CONFIG_PARAMETERS": "",
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_PAGER": "cat",
        "GIT_EDITOR": ":",
        "GIT_INDEX_FILE": str(index) if index is not None else NO_INDEX,
        "LC_ALL": "C",
        "LANGUAGE": "C",
        # Every repository this tool creates is SHA-1 (the base commit's SHA must be the same on
        # every machine); the variable only matters to `git init`.
        "GIT_DEFAULT_HASH": "sha1",
    }
    if git_dir is not None:
        env["GIT_DIR"] = str(git_dir)
    leaked = [name for name in _LOCATION_VARS if name in os.environ]
    for name in leaked:
        if name == "GIT_NAMESPACE":
            env[name] = ""  # empty namespace = the plain ref space
        elif name == "GIT_WORK_TREE":
            # With a git dir: pointed at it (no work tree content is read; it has no
            # .gitattributes). Without one: dropped by run(), so the cwd is the work tree.
            if git_dir is not None:
                env[name] = str(git_dir)
        else:
            raise EnvironmentProblem(
                f"{name} is set in the environment ({os.environ[name]!r}); it would point git at "
                "another object store than the repository named on the command line",
                hint=f"unset {name} before running hyperqwen-patches",
            )
    # A repository's info/grafts rewrites parents (core.useReplaceRefs does not cover it): no graft
    # file at all, so export, import and check all see the commits as stored.
    env["GIT_GRAFT_FILE"] = NO_INDEX + "-grafts"
    if extra:
        env.update(extra)
    return env


def run(
    args: Sequence[str | bytes],
    *,
    git_dir: Path | None,
    cwd: Path | None = None,
    input: bytes | Iterable[bytes] | None = None,
    index: Path | None = None,
    env: Mapping[str, str] | None = None,
    config: Sequence[tuple[str, str]] = (),
) -> GitResult:
    """Run ``git <pinned -c> <config -c> <args>`` on ``git_dir``; never raises for a non-zero exit.

    ``config`` adds command-specific ``-c`` pins after the global ones. ``index`` is a temporary index
    file for commands that need one (update-index, write-tree, apply --cached); without it the command
    sees no index at all. ``input`` may be an iterable of chunks, written to git as they come (a
    stream of 100 MB for ``fast-import`` is never held whole); an exception while it is consumed
    stops git and propagates.
    """
    command, work, run_env = _prepare(args, git_dir, cwd, index, env, config)
    try:
        if input is not None and not isinstance(input, (bytes, bytearray, memoryview)):
            return _streamed(command, work, run_env, input)
        proc = subprocess.run(
            command,
            cwd=work,
            env=run_env,
            input=input,
            # No input: git reads nothing from our stdin (a terminal would make it wait).
            stdin=subprocess.DEVNULL if input is None else None,
            capture_output=True,
            check=False,
        )
    except (FileNotFoundError, NotADirectoryError) as exc:
        if work is not None and not os.path.isdir(work):
            raise GitError(f"{work}: no such directory to run git in") from exc
        raise EnvironmentProblem(
            "git is not installed or not on PATH", hint="install git 2.39 or later"
        ) from exc
    return GitResult(proc.returncode, proc.stdout, proc.stderr)


def _prepare(
    args: Sequence[str | bytes],
    git_dir: Path | None,
    cwd: Path | None,
    index: Path | None,
    env: Mapping[str, str] | None,
    config: Sequence[tuple[str, str]],
) -> tuple[list[str], str | None, dict[str, str]]:
    """(argv, cwd, environment) of one isolated git call."""
    argv: list[str | bytes] = ["git"]
    for key, value in (*PINNED_CONFIG, *config):
        argv += ["-c", f"{key}={value}"]
    argv += list(args)
    full_env = isolated_env(git_dir, index=index, extra=env)
    log.debug("git %s (GIT_DIR=%s, cwd=%s)", _show_argv(argv[1:]), git_dir, cwd)
    work = str(cwd) if cwd is not None else (str(git_dir) if git_dir is not None else None)
    command = [os.fsdecode(a) if isinstance(a, bytes) else a for a in argv]
    # The isolation overrides on top of the caller's environment (PATH, HOME, TMPDIR).
    run_env = {**os.environ, **full_env}
    if "GIT_WORK_TREE" not in full_env or ("--bare" in args and args[:1] == ["init"]):
        # A leaked GIT_WORK_TREE goes: without a git dir the cwd is the work tree, and a bare
        # repository has none (git refuses one given).
        run_env.pop("GIT_WORK_TREE", None)
    return command, work, run_env


def start(
    args: Sequence[str | bytes],
    *,
    git_dir: Path | None,
    stderr: IO[bytes],
    config: Sequence[tuple[str, str]] = (),
) -> subprocess.Popen[bytes]:
    """Start ``git <args>`` isolated as :func:`run` does, talking to it over pipes (stdin, stdout);
    its stderr goes to ``stderr`` (a file: git may write there while we wait on stdout). The caller
    closes stdin and waits."""
    command, work, run_env = _prepare(args, git_dir, None, None, None, config)
    try:
        return subprocess.Popen(command, cwd=work, env=run_env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=stderr)  # fmt: skip
    except FileNotFoundError as exc:
        raise EnvironmentProblem(
            "git is not installed or not on PATH", hint="install git 2.39 or later"
        ) from exc


def _streamed(
    command: list[str], cwd: str | None, env: dict[str, str], chunks: Iterable[bytes]
) -> GitResult:
    """Run ``command`` writing ``chunks`` to its stdin one by one. Its output goes to temporary files,
    not pipes: git may write while we still write to it, and neither side then waits on the other."""
    import tempfile

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=out,
                                stderr=err)  # fmt: skip
        assert proc.stdin is not None
        try:
            with proc.stdin:
                for chunk in chunks:
                    proc.stdin.write(chunk)
        except BrokenPipeError:
            pass  # git stopped reading (it failed): its exit code and stderr say why
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        code = proc.wait()
        out.seek(0)
        err.seek(0)
        return GitResult(code, out.read(), err.read())


_VERSION: list[str] = []


def version() -> str:
    """``git --version``, once per process: part of the key of every cached git result, so another
    git never reuses this one's output."""
    if not _VERSION:
        result = run(["--version"], git_dir=None)
        _VERSION.append(result.stdout.decode("utf-8", errors="backslashreplace").strip())
    return _VERSION[0]


def check(
    args: Sequence[str | bytes],
    *,
    git_dir: Path | None,
    what: str,
    cwd: Path | None = None,
    input: bytes | Iterable[bytes] | None = None,
    index: Path | None = None,
    env: Mapping[str, str] | None = None,
    config: Sequence[tuple[str, str]] = (),
) -> bytes:
    """:func:`run`, raising :class:`GitError` (naming ``what`` and git's message) on a non-zero exit."""
    result = run(args, git_dir=git_dir, cwd=cwd, input=input, index=index, env=env, config=config)
    if not result.ok:
        message = show(result.stderr).strip().splitlines()
        first = message[-1] if message else f"exit {result.code}"
        raise GitError(
            f"{what}: git {_show_argv(list(args)[:3])} failed: {first}",
            hint=f"GIT_DIR={git_dir}; rerun with -v to see every git command",
        )
    return result.stdout


def git_dir_of(path: Path) -> Path:
    """The absolute git directory of a repository given by its top-level work tree or its git dir.

    No upward discovery from the current directory and no trust in an inherited ``GIT_DIR``: the
    repository is the one the user named (``path/.git`` when it exists, else ``path`` itself).
    """
    if not path.exists():
        raise GitError(f"{path}: no such repository", hint="pass a path to a git repository")
    candidate = (path / ".git" if (path / ".git").exists() else path).resolve()
    if candidate.is_file():  # a linked worktree's (or submodule's) ".git" file names its git dir
        candidate = _gitfile_target(candidate)
    if candidate in _GIT_DIRS:  # one git process per repository and run, not one per question
        return _GIT_DIRS[candidate]
    result = run(["rev-parse", "--absolute-git-dir"], git_dir=candidate)
    if not result.ok:
        raise GitError(
            f"{path}: not a git repository",
            hint="pass the top-level directory of a git repository or its .git directory",
        )
    found = Path(os.fsdecode(result.stdout.rstrip(b"\n")))
    _GIT_DIRS[candidate] = found
    return found


_GIT_DIRS: dict[Path, Path] = {}


def _gitfile_target(gitfile: Path) -> Path:
    try:
        text = gitfile.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError as exc:
        raise GitError(f"{gitfile}: unreadable ({exc.strerror})") from exc
    if not text.startswith("gitdir: "):
        raise GitError(f"{gitfile}: not a git repository (a file without a gitdir: line)")
    target = Path(text[len("gitdir: ") :].strip())
    return (gitfile.parent / target).resolve()


def init_bare(path: Path) -> Path:
    """Create an empty bare repository at ``path`` (a scratch repository of this tool)."""
    path.mkdir(parents=True, exist_ok=True)
    check(["init", "--quiet", "--bare"], git_dir=path, what=f"creating {path}")
    return path


def _show_argv(argv: Sequence[str | bytes]) -> str:
    return " ".join(os.fsdecode(a) if isinstance(a, bytes) else a for a in argv)

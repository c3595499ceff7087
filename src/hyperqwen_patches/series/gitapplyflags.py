"""The flags a row's ``git apply --check`` runs with: what a series' own check script passes to git
(``git apply --check --ignore-whitespace -p1 "$p"``), stated in the manifest as
``git_apply: [--ignore-whitespace]`` so the tool's git-apply check asks git exactly what the series'
CI asks it.

Only flags that change how git *reads* a patch are allowed: none that writes (``--index``,
``--3way``, ``--reject``), reaches outside the tree (``--unsafe-paths``, ``--directory``), picks files
(``--include``, ``--exclude``) or changes the direction or strip level (``-R``; every row applies with
``-p1``). Pure: no I/O here.
"""

from __future__ import annotations

import re
import shlex

# The default contract (docs/static-checks.md); a row's own --whitespace=... replaces its last flag.
BASE_ARGS = ("apply", "--check", "--whitespace=error", "-p1")

# Each flag a row may state, and why it is harmless: it changes how a hunk is matched or counted.
SAFE_FLAGS = (
    "--ignore-whitespace",  # match context ignoring whitespace (what CRLF-saved series need)
    "--ignore-space-change",  # git's synonym of the above
    "--recount",  # trust the hunk bodies over their @@ line counts
    "--inaccurate-eof",  # diff's missing-newline-at-EOF quirks
    "--unidiff-zero",  # hunks without context (diff -U0)
    "--allow-empty",  # a patch with no hunks is not an error
)
WHITESPACE_MODES = ("nowarn", "warn", "error", "error-all")
_CONTEXT_RE = re.compile(r"-C[0-9]+")  # fewer lines of context must match (git's own -C<n>)


def flag_problem(flag: str) -> str | None:
    """Why ``flag`` may not be stated on a row (None: it may)."""
    if flag in SAFE_FLAGS or _CONTEXT_RE.fullmatch(flag):
        return None
    if flag.startswith("--whitespace="):
        mode = flag.split("=", 1)[1]
        if mode in WHITESPACE_MODES:
            return None
        return (
            f"{flag!r}: --whitespace= takes one of {', '.join(WHITESPACE_MODES)} "
            "(fix and strip rewrite the patch)"
        )
    if flag in ("--check", "-p1"):
        return f"{flag!r} is always given (git apply --check ... -p1); leave it out"
    return (
        f"{flag!r} is not a flag a row may state; allowed: {', '.join(SAFE_FLAGS)}, "
        f"--whitespace=<{'|'.join(WHITESPACE_MODES)}>, -C<n>"
    )


def problems(flags: list[str]) -> list[tuple[int, str]]:
    """(index, message) for each flag that may not be stated or is stated twice."""
    out: list[tuple[int, str]] = []
    seen: dict[str, int] = {}
    for i, flag in enumerate(flags):
        message = flag_problem(flag)
        key = "--whitespace=" if flag.startswith("--whitespace=") else flag
        if message is None and key in seen:
            message = f"{flag!r} is given twice (first at [{seen[key]}])"
        if message is not None:
            out.append((i, message))
        seen.setdefault(key, i)
    return out


def check_args(flags: tuple[str, ...]) -> tuple[str, ...]:
    """The git arguments for a row with ``flags`` (validated): the base contract plus them, a row's
    own ``--whitespace=`` in place of the default."""
    args = list(BASE_ARGS)
    if any(f.startswith("--whitespace=") for f in flags):
        args.remove("--whitespace=error")
    return tuple(args[:-1]) + flags + (args[-1],)


def flags_in_command(line: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The flags a shell line's ``git apply --check`` passes: (the ones a row may state, the ones
    it may not). ``--check`` and the strip level (``-p1``, ``-p 1``) are the contract's own."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote: read it word by word all the same
        words = line.split()
    try:
        start = next(i for i in range(len(words) - 1) if words[i : i + 2] == ["git", "apply"])
    except StopIteration:
        return (), ()
    kept: list[str] = []
    refused: list[str] = []
    rest = words[start + 2 :]
    i = 0
    while i < len(rest):
        word = rest[i]
        i += 1
        if word in ("|", "||", "&&", ";") or not word.startswith("-"):
            if word in ("|", "||", "&&", ";"):
                break
            continue
        if word in ("--check", "-p1"):
            continue
        if word == "-p" and i < len(rest):
            i += 1
            continue
        if word == "-C" and i < len(rest) and rest[i].isdigit():
            word, i = f"-C{rest[i]}", i + 1
        (kept if flag_problem(word) is None else refused).append(word)
    return tuple(dict.fromkeys(kept)), tuple(dict.fromkeys(refused))

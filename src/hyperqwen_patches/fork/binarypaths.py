"""Which paths of a commit git sees as binary (by content; no attributes apply): one commit, or every
commit of an export point from one ``diff-tree --stdin``, cached when run in a scratch view."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from pathlib import Path

from hyperqwen_patches import gitrun
from hyperqwen_patches.errors import GitError
from hyperqwen_patches.fork import reading as forkgit
from hyperqwen_patches.fork.scratchcache import b64, cached_in_scratch

_NUMSTAT_CONFIG = (("core.attributesFile", "/dev/null"),)
NUMSTAT_ARGS = (
    "diff-tree",
    "-r",
    "-z",
    "--numstat",
    "--no-renames",
    "--no-textconv",
    "--no-ext-diff",
)


def binary_paths(git_dir: Path, commit: forkgit.ForkCommit) -> list[bytes]:
    """Paths git itself sees as binary in this commit (by content: no attributes apply here)."""
    out = gitrun.check(
        [*NUMSTAT_ARGS, commit.parents[0], commit.sha],
        git_dir=git_dir,
        config=_NUMSTAT_CONFIG,
        what=f"checking {commit.sha[:12]} for binary changes",
    )
    return [r[4:] for r in out.split(b"\0") if r.startswith(b"-\t-\t")]


def binary_paths_of(
    git_dir: Path, commits: Sequence[forkgit.ForkCommit], *, scratch: bool = False
) -> dict[str, list[bytes]]:
    """:func:`binary_paths` of every single-parent commit, from one ``diff-tree --stdin`` (one git
    process per export point instead of one per commit).

    With ``scratch`` (``git_dir`` is a :func:`forkgit.scratch_repo`: no config, no attributes of its
    own) the answer is pure in the commits (a SHA names a commit's whole content and its parent),
    git's version and the pinned arguments, and comes from the result cache when seen before. A
    user's repository can change it (``info/attributes``), so there it is always computed.
    """
    shas = [c.sha for c in commits if len(c.parents) == 1]
    if not shas:
        return {}

    def compute() -> dict[str, list[str]]:
        out = gitrun.check(
            [*NUMSTAT_ARGS, "--stdin", "--always"],
            git_dir=git_dir,
            config=_NUMSTAT_CONFIG,
            input="".join(f"{sha}\n" for sha in shas).encode(),
            what=f"checking {len(shas)} commits for binary changes",
        )
        found: dict[str, list[str]] = {}
        current: list[str] = []
        # Each commit's output is its SHA (a record without a tab), then "added\tdeleted\tpath" records.
        for item in out.split(b"\0"):
            if not item:
                continue
            if b"\t" not in item:
                current = found.setdefault(item.decode(), [])
            elif item.startswith(b"-\t-\t"):
                current.append(b64(item[4:]))
        missing = set(shas) - set(found)
        if missing:
            raise GitError(f"git diff-tree --stdin did not report {sorted(missing)[0][:12]}")
        return found

    found = cached_in_scratch(
        scratch,
        "binary-paths",
        [" ".join(NUMSTAT_ARGS), repr(_NUMSTAT_CONFIG), *shas],
        compute,
    )
    return {sha: [base64.b64decode(p) for p in paths] for sha, paths in found.items()}

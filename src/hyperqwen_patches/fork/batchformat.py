"""The pinned format-patch of a whole linear chain from one ``git format-patch`` (one process per export
point instead of one per commit), byte for byte what ``formatpatch.format_commit`` prints per commit."""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Sequence
from pathlib import Path

from hyperqwen_patches import gitrun
from hyperqwen_patches.errors import GitError
from hyperqwen_patches.fork import reading as forkgit
from hyperqwen_patches.fork.formatpatch import format_commit, format_patch_argv, format_patch_config
from hyperqwen_patches.fork.scratchcache import b64, cached_in_scratch


def format_commits(
    view: Path,
    commits: Sequence[forkgit.ForkCommit],
    *,
    scratch: bool = False,
    relative: str | None = None,
) -> dict[str, bytes]:
    """:func:`format_commit` of each commit of a linear chain, from one ``git format-patch``.

    The same pinned options, written one file per commit (``-o`` with ``--numbered-files`` instead of
    ``--stdout``: files need no splitting, and a message cannot fake a boundary), so each file is byte
    for byte what ``format_commit`` prints (tests/test_export_pinned.py compares them). One process
    per export point instead of one per commit. With ``scratch`` (``view`` is a
    :func:`forkgit.scratch_repo`, with no config or attributes of its own) the output is pure in the
    chain's SHAs, git's version and the pinned options and config, which make the key of the result
    cache, so a warm run starts no git at all; in a user's repository its attributes can change the
    bytes (tests/test_batched_git.py), so there it is always computed. Anything but a linear chain
    falls back to one call each.
    """
    chain = [c.sha for c in commits]
    linear = all(len(c.parents) == 1 for c in commits) and all(
        commits[i].parents[0] == chain[i - 1] for i in range(1, len(commits))
    )
    if len(commits) < 2 or not linear:
        return {c.sha: format_commit(view, c.sha, relative=relative) for c in commits}
    args = [a for a in format_patch_argv(chain[-1], relative=relative) if a != "--stdout"][:-2]
    span = f"{commits[0].parents[0]}..{chain[-1]}"

    def compute() -> list[str]:
        with tempfile.TemporaryDirectory(prefix="hqp-format-patch-") as tmp:
            gitrun.check(
                [*args, "-o", tmp, "--numbered-files", "--start-number=1", span],
                git_dir=view,
                config=format_patch_config(),
                what=f"exporting {len(chain)} commits",
            )
            files = sorted(Path(tmp).iterdir(), key=lambda p: int(p.name))
            if len(files) != len(chain):
                raise GitError(
                    f"git format-patch wrote {len(files)} files for {len(chain)} commits",
                    hint="rerun with -v to see the git command",
                )
            return [b64(f.read_bytes()) for f in files]

    texts = cached_in_scratch(
        scratch,
        "format-patch",
        [" ".join(args), repr(format_patch_config()), span, *chain],
        compute,
    )
    return {sha: base64.b64decode(t) for sha, t in zip(chain, texts, strict=True)}

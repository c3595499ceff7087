"""``port --rebase``: the new fork branch on the new release, one commit per row that went through,
with the export point's messages and authors.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from hyperqwen_patches.console import show
from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.port.model import PortReport, RebaseRequest, RebaseResult
from hyperqwen_patches.sources.pristine import PristineTree

# --- --rebase: the new fork branch -----------------------------------------------------------------

_VERSION_IN_BRANCH = re.compile(r"(?P<pre>.*?)(?P<ver>\d+\.\d+(?:\.\d+)?)(?P<post>[^0-9]*)$")


def default_branch(manifest: Any, to_version: str) -> str:
    """The export point's branch with the pin's version replaced (``qwen38/0.29`` -> ``qwen38/0.30``);
    ``port/<version>`` when there is no export point or its name carries no version."""
    if manifest.export_points:
        branch = manifest.export_points[0].branch
        m = _VERSION_IN_BRANCH.match(branch)
        if m is not None:
            old = m["ver"]
            parts = to_version.split(".")
            new = ".".join(parts[: len(old.split("."))])
            if new != old:
                return f"{m['pre']}{new}{m['post']}"
    return f"port/{to_version}"


def _author_env(header: bytes) -> dict[str, str]:
    """The identity env of a commit: its author kept, the committer pinned (as ``import`` does)."""
    from hyperqwen_patches.sources import basecommit

    env: dict[str, str] = {}
    for line in header.split(b"\n"):
        if line.startswith(b"author "):
            ident = line[len(b"author ") :]
            name, _, rest = ident.partition(b" <")
            email, _, date = rest.partition(b"> ")
            env = basecommit.fixed_identity_env(date.decode())
            env["GIT_AUTHOR_NAME"] = name.decode("utf-8", "surrogateescape")
            env["GIT_AUTHOR_EMAIL"] = email.decode("utf-8", "surrogateescape")
    return env


def _fork_messages(git_dir: Path, manifest: Any) -> dict[str, tuple[bytes, dict[str, str]]]:
    """Row -> (message, identity) from the export points' commits in the fork, when it has them.

    Only commits are read: whatever the fork's work tree or index hold is not looked at.
    """
    from hyperqwen_patches import gitrun
    from hyperqwen_patches.fork import exporting
    from hyperqwen_patches.fork import reading as forkgit

    found: dict[str, tuple[bytes, dict[str, str]]] = {}
    for point in manifest.export_points:
        tip = forkgit.resolve(git_dir, f"refs/heads/{point.branch}", what="port --rebase")
        if tip is None:
            continue
        base = exporting.find_base(
            git_dir, tip, package=manifest.package, pin=manifest.pin, branch=point.branch
        )
        for commit in forkgit.list_commits(git_dir, base, tip):
            if commit.row is None or commit.row in found:
                continue
            raw = gitrun.check(
                ["cat-file", "commit", commit.sha], git_dir=git_dir, what="reading a fork commit"
            )
            header = raw.partition(b"\n\n")[0]
            found[commit.row] = (commit.message, _author_env(header))
    return found


def _with_port_note(message: bytes, note: bytes) -> bytes:
    """Insert a paragraph before the trailer paragraph (``Hqp-Row`` stays last)."""
    body = message.rstrip(b"\n")
    head, sep, last = body.rpartition(b"\n\n")
    if sep and last.lower().startswith(b"hqp-row:"):
        return head + b"\n\n" + note.rstrip(b"\n") + b"\n\n" + last + b"\n"
    return body + b"\n\n" + note.rstrip(b"\n") + b"\n"


def rebase_fork(
    manifest: Any, report: PortReport, new: PristineTree, request: RebaseRequest
) -> RebaseResult:
    """Build the new fork branch: the new release's base commit, then one commit per row that goes
    through in sequence (the row's hunks that apply, at their refreshed offsets). Rows the release
    carries and conflicting rows get no commit. Only objects and the new branch's ref are written."""
    from hyperqwen_patches import gitrun
    from hyperqwen_patches.errors import GitError
    from hyperqwen_patches.fork import importing, replay
    from hyperqwen_patches.fork import reading as forkgit
    from hyperqwen_patches.sources import basecommit

    git_dir = gitrun.git_dir_of(request.fork)
    branch = request.branch or default_branch(manifest, report.to_version)
    ref = f"refs/heads/{branch}"
    protected = {p.branch for p in manifest.export_points}
    if branch in protected:
        raise UsageError(
            f"--branch {branch} is an export point of the {manifest.pin} series; port never "
            "rewrites the old branch",
            hint="name a new branch with --branch",
        )
    check = gitrun.run(["check-ref-format", ref], git_dir=git_dir)
    if not check.ok:
        raise UsageError(f"--branch {branch!r} is not a valid branch name")
    previous = forkgit.resolve(git_dir, ref, what="port --rebase")
    if previous is not None and not request.force:
        raise GitError(
            f"branch {branch} already exists in {request.fork} (at {previous[:12]})",
            hint="pass --force to move it, or name another branch with --branch",
        )
    head = gitrun.run(["symbolic-ref", "--quiet", "HEAD"], git_dir=git_dir).stdout.strip()
    if previous is not None and head == ref.encode():
        raise GitError(
            f"branch {branch} is checked out in {request.fork}; port never moves a checked-out branch"
        )

    messages = _fork_messages(git_dir, manifest)
    base = basecommit.write_base_commit(
        git_dir, new, package=manifest.package, version=report.to_version
    )
    state = replay.TreeState(replay.tree_entries(git_dir, base.commit), new.read)
    parent = base.commit
    commits: list[tuple[str, str]] = []
    from_patch_files = False
    with forkgit.scratch_repo() as view:
        for row in report.rows:
            attempt = row.in_sequence
            if attempt.carried is None or attempt.status not in (
                "exact",
                "offset",
                "partly-upstream",
            ):
                continue
            replay.apply_row(state, attempt.carried, row=row.name)
            if row.name in messages:
                message, env = messages[row.name]
            else:
                from_patch_files = True
                message, env = importing.commit_for_row(view, manifest, manifest.row(row.name))
            if row.status == "partly-upstream":
                dropped = ", ".join(
                    f"{show(h.path)} hunk #{h.number}"
                    for h in attempt.hunks
                    if h.status == "upstream"
                )
                message = _with_port_note(
                    message,
                    f"Ported to {report.package} {report.to_version}: {dropped} dropped, "
                    f"already upstream.".encode(),
                )
            parent = importing.write_state_commit(git_dir, state, parent, message, env)
            commits.append((row.name, parent))
    gitrun.check(
        [
            "update-ref",
            "-m",
            f"hyperqwen-patches port --to {report.to_version} --rebase",
            ref,
            parent,
            previous or "0" * 40,
        ],
        git_dir=git_dir,
        what=f"creating {branch}",
    )
    return RebaseResult(
        fork=request.fork,
        branch=branch,
        base=base.commit,
        tip=parent,
        previous=previous,
        commits=tuple(commits),
        conflicts=tuple(r.name for r in report.rows if r.status == "conflicts"),
        upstream=tuple(r.name for r in report.rows if r.status == "upstream"),
        messages_from="patch files" if from_patch_files or not messages else "fork",
    )

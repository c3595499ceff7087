"""``port --rebase``: the new fork branch on the new release, one commit per row that went through,
with the export point's messages and authors.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, cast

from hyperqwen_patches.console import show
from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.port.model import (
    AdjacentSite,
    BranchCommit,
    CommitHow,
    MergedRow,
    Paused,
    PortReport,
    PortRow,
    RebaseRequest,
    RebaseResult,
)
from hyperqwen_patches.records import field, record
from hyperqwen_patches.sources.pristinetree import PristineTree

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hyperqwen_patches.fork.treestate import TreeState
    from hyperqwen_patches.port.pausing import RebaseState
    from hyperqwen_patches.port.rowstep import RowOutcome
    from hyperqwen_patches.series.manifestmodel import Manifest

# Row -> (message, identity environment) of its commit in the fork, as the rebase began.
Messages = dict[str, tuple[bytes, dict[str, str]]]


class RowMessage(NamedTuple):
    """A row's commit message and identity for the new branch; ``built``: made from its patch file
    (the fork had no commit for it)."""

    text: bytes
    env: dict[str, str]
    built: bool


# --- --rebase: the new fork branch -----------------------------------------------------------------

_VERSION_IN_BRANCH = re.compile(r"(?P<pre>.*?)(?P<ver>\d+\.\d+(?:\.\d+)?)(?P<post>[^0-9]*)$")


def default_branch(manifest: Manifest, to_version: str) -> str:
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


def _fork_messages(git_dir: Path, manifest: Manifest) -> Messages:
    """Row -> (message, identity) from the export points' commits in the fork, when it has them.

    Only commits are read: whatever the fork's work tree or index hold is not looked at.
    """
    from hyperqwen_patches.fork import exporting
    from hyperqwen_patches.fork import reading as forkgit

    found: Messages = {}
    for point in manifest.export_points:
        tip = forkgit.resolve(git_dir, f"refs/heads/{point.branch}", what="port --rebase")
        if tip is None:
            continue
        base = exporting.find_base(
            git_dir, tip, package=manifest.package, pin=manifest.pin, branch=point.branch
        )
        wanted = [
            c for c in forkgit.list_commits(git_dir, base, tip) if c.row and c.row not in found
        ]
        # One cat-file for all of the point's commits (a process each cost ~6 ms a row).
        raw = forkgit.read_objects(git_dir, [c.sha for c in wanted], kind="commit")
        for commit in wanted:
            if commit.row is not None and commit.row not in found:
                header = raw[commit.sha].partition(b"\n\n")[0]
                found[commit.row] = (commit.message, forkgit.author_env(header))
    return found


def _with_port_note(message: bytes, note: bytes) -> bytes:
    """Insert a paragraph before the trailer paragraph (``Hqp-Row`` stays last)."""
    body = message.rstrip(b"\n")
    head, sep, last = body.rpartition(b"\n\n")
    if sep and last.lower().startswith(b"hqp-row:"):
        return head + b"\n\n" + note.rstrip(b"\n") + b"\n\n" + last + b"\n"
    return body + b"\n\n" + note.rstrip(b"\n") + b"\n"


def _message(
    view: Callable[[], Path],
    manifest: Manifest,
    messages: Messages,
    row: str,
) -> RowMessage:
    """The row's message and identity: the old fork commit's, else built from the patch file."""
    from hyperqwen_patches.fork import importing

    if row in messages:
        text, env = messages[row]
        return RowMessage(text, env, built=False)
    found = manifest.row(row)
    assert found is not None, row  # the rows rebased are the manifest's
    message, env = importing.commit_for_row(view(), manifest, found)
    return RowMessage(message, env, built=True)


def paused_rebase(fork: Path) -> RebaseState | None:
    """The state of a paused ``port --rebase`` in ``fork`` (pausing.RebaseState), or None."""
    from hyperqwen_patches import gitrun
    from hyperqwen_patches.port import pausing

    return pausing.load(gitrun.git_dir_of(fork))


def abort_rebase(fork: Path) -> tuple[RebaseState | None, list[Path]]:
    """Drop a paused rebase: its state and the worktrees it opened; no branch was written. Returns
    the state (None when it was damaged) and the worktrees removed.

    Only worktrees git lists for this fork, locked by a rebase, are removed: a state file naming
    another path (tampered with, or from another fork) deletes nothing. A state that cannot be read
    is dropped too (it would otherwise wedge every later --continue and --abort)."""
    from hyperqwen_patches import gitrun
    from hyperqwen_patches.errors import GitError
    from hyperqwen_patches.port import pausing

    git_dir = gitrun.git_dir_of(fork)
    with pausing.exclusive(git_dir):
        try:
            saved = pausing.load(git_dir)
        except GitError:
            saved = None  # damaged: dropped all the same, with the worktrees the rebase opened
        else:
            if saved is None:
                raise UsageError(f"no port --rebase is paused in {fork}: nothing to abort")
        removed = pausing.ours(git_dir)
        for worktree in removed:
            pausing.close_worktree(git_dir, worktree)
        pausing.drop(git_dir)
    return saved, removed


def _start(
    git_dir: Path, manifest: Manifest, report: PortReport, request: RebaseRequest
) -> tuple[str, str | None]:
    """Check the new branch may be written; (branch, its current commit or None)."""
    from hyperqwen_patches import gitrun
    from hyperqwen_patches.errors import GitError
    from hyperqwen_patches.fork import reading as forkgit

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
    _refuse_checked_out(git_dir, branch, request.fork)
    return branch, previous


def _refuse_checked_out(git_dir: Path, branch: str, fork: Path) -> None:
    from hyperqwen_patches import gitrun
    from hyperqwen_patches.errors import GitError

    head = gitrun.run(["symbolic-ref", "--quiet", "HEAD"], git_dir=git_dir).stdout.strip()
    if head == f"refs/heads/{branch}".encode():
        raise GitError(
            f"branch {branch} is checked out in {fork}; port never moves a checked-out branch"
        )


def rebase_fork(
    manifest: Manifest,
    report: PortReport,
    rows: Sequence[PortRow],
    old: PristineTree,
    new: PristineTree,
    request: RebaseRequest,
    *,
    sources: tuple[str | None, str | None] = (None, None),
) -> RebaseResult:
    """Build the new fork branch: the new release's base commit, then one commit per row, in order.

    Each row is tried on the branch as built so far: at fuzz 0 (without the hunks the release
    carries), else by a three-way merge of its old fork commit (threeway.py). A row the release
    carries gets no commit. A row that needs a person pauses the rebase: its files go into a
    worktree with conflict markers, the state into the fork's git dir, and ``--continue`` (the
    person's resolution) or ``--skip`` goes on. The branch's ref is written once, at the end; only
    objects, that ref and, while paused, one linked worktree and the state file are written.
    """
    from hyperqwen_patches import gitrun
    from hyperqwen_patches.port import pausing

    git_dir = gitrun.git_dir_of(request.fork)
    with pausing.exclusive(git_dir):
        return _rebase(manifest, report, rows, old, new, request, sources, git_dir)


@record
class _Progress:
    """What the rebase has built so far: carried from row to row, saved at a pause, read back by
    --continue (pausing.RebaseState holds it as JSON)."""

    branch: str
    previous: str | None
    base: str
    parent: str  # the last commit built
    from_patch_files: bool
    commits: list[BranchCommit] = field(default_factory=list)
    merged: list[MergedRow] = field(default_factory=list)
    adjacent: list[AdjacentSite] = field(default_factory=list)  # review these
    upstream: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    earlier: int = 0  # commits made before this run (a resumed rebase)

    @classmethod
    def of_state(cls, saved: RebaseState) -> _Progress:
        def raw(path: str) -> bytes:
            return path.encode("utf-8", "surrogateescape")

        return cls(
            branch=saved.branch,
            previous=saved.previous,
            base=saved.base,
            parent=saved.parent,
            from_patch_files=saved.messages_from == "patch files",
            commits=[BranchCommit(r, c, cast("CommitHow", h)) for r, c, h in saved.commits],
            merged=[MergedRow(r, tuple(raw(p) for p in ps)) for r, ps in saved.merged],
            adjacent=[AdjacentSite(r, raw(p), n, w) for r, p, n, w in saved.adjacent],
            upstream=list(saved.upstream),
            skipped=list(saved.skipped),
            earlier=len(saved.commits),
        )

    def wrote(self, row: str, commit: str, outcome: RowOutcome) -> None:
        self.parent = commit
        self.commits.append(BranchCommit(row, commit, outcome.how))
        if outcome.how == "merged":
            self.merged.append(MergedRow(row, outcome.merged))
            self.adjacent += [AdjacentSite(row, p, n, w) for p, n, w in outcome.adjacent]

    def to_state(self, row: str, worktree: Path, outcome: RowOutcome, **more: Any) -> RebaseState:
        from hyperqwen_patches.port import pausing

        return pausing.RebaseState(
            branch=self.branch,
            previous=self.previous,
            base=self.base,
            parent=self.parent,
            row=row,
            worktree=str(worktree),
            files=[f.to_json() for f in outcome.files],
            findings=list(outcome.findings),
            commits=[list(c) for c in self.commits],
            merged=[[r, [show(p) for p in ps]] for r, ps in self.merged],
            adjacent=[[r, show(p), n, w] for r, p, n, w in self.adjacent],
            upstream=self.upstream,
            skipped=self.skipped,
            messages_from="patch files" if self.from_patch_files else "fork",
            **more,
        )

    def result(self, fork: Path, paused: Paused | None) -> RebaseResult:
        return RebaseResult(
            fork=fork,
            branch=self.branch,
            base=self.base,
            tip=self.parent,
            previous=self.previous,
            commits=tuple(self.commits),
            upstream=tuple(self.upstream),
            messages_from="patch files" if self.from_patch_files else "fork",
            state="done" if paused is None else "paused",
            merged=tuple(self.merged),
            adjacent=tuple(self.adjacent),
            skipped=tuple(self.skipped),
            paused=paused,
            earlier=self.earlier,
        )


def _rebase(
    manifest: Manifest,
    report: PortReport,
    rows: Sequence[PortRow],
    old: PristineTree,
    new: PristineTree,
    request: RebaseRequest,
    sources: tuple[str | None, str | None],
    git_dir: Path,
) -> RebaseResult:
    """Begin (or resume after a pause), then one step per row: try it, commit it or pause."""
    from hyperqwen_patches.fork import reading as forkgit
    from hyperqwen_patches.fork.commitstream import CommitStream
    from hyperqwen_patches.fork.importing import write_state_commit
    from hyperqwen_patches.port import pausing
    from hyperqwen_patches.port.rowstep import RowPorter
    from hyperqwen_patches.port.stalecopy import may_add_functions

    saved = pausing.load(git_dir)
    if request.action != "start" and saved is not None and saved.messages:
        messages = {
            row: (text.encode("utf-8", "surrogateescape"), dict(env))
            for row, (text, env) in saved.messages.items()
        }
    else:
        messages = _fork_messages(git_dir, manifest)
    with forkgit.lazy_scratch_repo() as view, CommitStream(git_dir) as stream:
        if request.action == "start":
            progress, state, start = _begin(
                git_dir, manifest, report, new, request, saved, messages
            )
            done_with = None
        else:
            progress, state, start = _resume(
                git_dir, manifest, report, rows, new, request, saved, view, messages
            )
            # The person's worktree goes only once what it gave is recorded: in the next pause's
            # state or in the branch (a kill in between loses no resolution).
            assert saved is not None  # _resume refused otherwise
            done_with = Path(saved.worktree)
        porter = RowPorter(
            manifest.package,
            (report.from_version, report.to_version),
            old,
            new,
            accept=[a.name for a in manifest.accepted_names],
        )
        porter.skip_to(rows[:start])
        paused: Paused | None = None
        for row in rows[start:]:
            if row.patch is None:
                continue
            outcome = porter.port(row, state)
            if outcome.kind == "upstream":
                progress.upstream.append(row.name)
            elif outcome.kind == "needs-person":
                stream.close()  # the commits so far into the object store before a state names them
                paused = _pause(
                    git_dir, report, request, sources, progress, row, outcome, done_with, messages
                )
                # The index a later row's copy search needs is built by the run that pauses, not by
                # the --continue a person waits on after resolving (~0.7 s at vLLM's size).
                later = rows[rows.index(row) + 1 :]
                if any(r.patch is not None and may_add_functions(r.patch) for r in later):
                    porter.checks.copies.keep_ready()
                break
            else:
                message, env, built = _message(view, manifest, messages, row.name)
                progress.from_patch_files |= built
                if outcome.note:
                    message = _with_port_note(message, outcome.note.encode())
                commit = write_state_commit(
                    git_dir, state, progress.parent, message, env, stream=stream
                )
                progress.wrote(row.name, commit, outcome)
        stream.close()
    if paused is None:
        _write_branch(
            git_dir, progress.branch, progress.parent, progress.previous, report.to_version
        )
        if done_with is not None:
            pausing.close_worktree(git_dir, done_with)
        pausing.drop(git_dir)
    return progress.result(request.fork, paused)


def _begin(
    git_dir: Path,
    manifest: Manifest,
    report: PortReport,
    new: PristineTree,
    request: RebaseRequest,
    saved: RebaseState | None,
    messages: Messages,
) -> tuple[_Progress, TreeState, int]:
    """A new rebase: the new release's base commit, the branch it will be; nothing paused before."""
    from hyperqwen_patches.errors import GitError
    from hyperqwen_patches.fork import treestate
    from hyperqwen_patches.sources import basecommit

    if saved is not None:
        raise GitError(
            f"a port --rebase to {saved.to_version} is paused in {request.fork} at row "
            f"{saved.row} (worktree {saved.worktree})",
            hint="finish it with --continue or --skip, or drop it with --abort",
        )
    branch, previous = _start(git_dir, manifest, report, request)
    base = basecommit.base_commit_in(
        git_dir, new, label=new.label, package=manifest.package, version=report.to_version
    )
    state = treestate.TreeState(treestate.tree_entries(git_dir, base), new.read)
    return _Progress(branch, previous, base, base, from_patch_files=not messages), state, 0


def _resume(
    git_dir: Path,
    manifest: Manifest,
    report: PortReport,
    rows: Sequence[PortRow],
    new: PristineTree,
    request: RebaseRequest,
    saved: RebaseState | None,
    view: Callable[[], Path],
    messages: Messages,
) -> tuple[_Progress, TreeState, int]:
    """--continue (the person's resolution becomes the paused row's commit) or --skip (the row is
    left out); the rebase goes on after the paused row."""
    from hyperqwen_patches.fork import treestate
    from hyperqwen_patches.port import pausing

    names = [r.name for r in rows]
    if saved is None:
        raise UsageError(
            f"no port --rebase is paused in {request.fork}: nothing to {request.action}"
        )
    if saved.to_version != report.to_version:
        raise UsageError(
            f"the paused port --rebase is to {saved.to_version}, not {report.to_version}"
        )
    if saved.row not in names:
        raise UsageError(
            f"the paused row {saved.row} is no longer in the manifest",
            hint="--abort drops the paused rebase",
        )
    progress = _Progress.of_state(saved)
    _refuse_checked_out(git_dir, progress.branch, request.fork)
    if request.action == "continue" and not saved.ready:
        # The last run stopped while writing the worktree: nothing in it is a resolution. The row
        # is tried again (the same outcome) and its worktree set up again.
        state = treestate.state_of_commit(
            git_dir, progress.parent, known=new.read, base=progress.base
        )
        return progress, state, names.index(saved.row)
    if request.action == "skip":
        progress.skipped.append(saved.row)
    else:
        message, env, built = _message(view, manifest, messages, saved.row)
        progress.from_patch_files |= built
        conflicted = [f["path"] for f in saved.files if f["how"] == "conflict"] or [
            f["path"] for f in saved.files
        ]
        note = (
            f"Ported to {report.package} {report.to_version} by hand: "
            f"{', '.join(conflicted)} resolved in a three-way merge."
        )
        commit, _ = pausing.take_resolution(
            git_dir, saved, _with_port_note(message, note.encode()), env
        )
        progress.parent = commit
        progress.commits.append(BranchCommit(saved.row, commit, "resolved"))
    state = treestate.state_of_commit(git_dir, progress.parent, known=new.read, base=progress.base)
    return progress, state, names.index(saved.row) + 1


def _pause(
    git_dir: Path,
    report: PortReport,
    request: RebaseRequest,
    sources: tuple[str | None, str | None],
    progress: _Progress,
    row: PortRow,
    outcome: RowOutcome,
    done_with: Path | None,
    messages: Messages,
) -> Paused:
    """Save the state, then put the row's files in the worktree for a person (the one the last
    pause used, moved on, where there was one)."""
    from hyperqwen_patches.port import pausing

    worktree = (request.worktree or pausing.default_worktree(
        request.fork, git_dir, report.to_version)).resolve()  # fmt: skip
    # Runnable from anywhere (the person is likely in the worktree).
    resume = f"hyperqwen-patches port --rebase --continue --fork {request.fork}" + (
        f" --repo {request.repo}" if request.repo is not None else ""
    )
    if worktree != done_with:
        pausing.refuse_existing(worktree)
    state = progress.to_state(
        row.name,
        worktree,
        outcome,
        to_version=report.to_version,
        to_source=sources[0],
        from_source=sources[1],
        ready=False,
        messages={
            name: [text.decode("utf-8", "surrogateescape"), env]
            for name, (text, env) in messages.items()
        },
    )
    pausing.save(git_dir, state)
    # A failure from here on leaves the state: --abort removes what was made, --continue sets the
    # worktree up again.
    files = outcome.files
    if done_with is None or not (
        worktree == done_with and pausing.move_worktree(git_dir, worktree, progress.parent, files)
    ):
        if done_with is not None:
            pausing.close_worktree(git_dir, done_with)
        pausing.open_worktree(git_dir, worktree, progress.parent, files)
    state.ready = True
    pausing.save(git_dir, state)
    return Paused(row.name, worktree, tuple(files), resume, outcome.findings)


def _write_branch(git_dir: Path, branch: str, tip: str, previous: str | None, version: str) -> None:
    from hyperqwen_patches import gitrun

    gitrun.check(
        [
            "update-ref",
            "-m",
            f"hyperqwen-patches port --to {version} --rebase",
            f"refs/heads/{branch}",
            tip,
            previous or "0" * 40,
        ],
        git_dir=git_dir,
        what=f"creating {branch}",
    )

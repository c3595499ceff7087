"""``port --rebase``: the new fork branch on the new release, one commit per row that went through,
with the export point's messages and authors.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hyperqwen_patches.console import show
from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.port.model import (
    CommitHow,
    Paused,
    PortReport,
    PortRow,
    RebaseRequest,
    RebaseResult,
)
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
        wanted = [
            c for c in forkgit.list_commits(git_dir, base, tip) if c.row and c.row not in found
        ]
        # One cat-file for all of the point's commits (a process each cost ~6 ms a row).
        raw = forkgit.read_objects(git_dir, [c.sha for c in wanted], kind="commit")
        for commit in wanted:
            if commit.row not in found:
                header = raw[commit.sha].partition(b"\n\n")[0]
                found[commit.row] = (commit.message, _author_env(header))
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
    manifest: Any,
    messages: dict[str, tuple[bytes, dict[str, str]]],
    row: str,
) -> tuple[bytes, dict[str, str], bool]:
    """The row's message and identity: the old fork commit's, else built from the patch file (the
    third item says which)."""
    from hyperqwen_patches.fork import importing

    if row in messages:
        return (*messages[row], False)
    message, env = importing.commit_for_row(view(), manifest, manifest.row(row))
    return message, env, True


class _OldSide:
    """The pin with the rows applied in order: each row's file before and after it, as the old fork
    commit's parent and the commit hold them (replay identity), for the three-way merge."""

    def __init__(self, old: PristineTree) -> None:
        self._old = old
        self._state: dict[bytes, bytes | None] = {}

    def read(self, path: bytes) -> bytes | None:
        return self._state[path] if path in self._state else self._old.read(path)

    def step(self, row: PortRow) -> tuple[dict[bytes, bytes | None], dict[bytes, int]]:
        """Apply ``row``; return its changes and modes (the state moves on only after the caller
        has read the "before" side: call :meth:`commit` then)."""
        from hyperqwen_patches.fork.replay import row_result

        assert row.patch is not None
        result = row_result(row.patch, self.read, row=f"{row.name} (on {self._old.label})")
        return dict(result.changes), dict(result.modes)

    def reader_after(self, changes: dict[bytes, bytes | None]) -> Callable[[bytes], bytes | None]:
        """The files as the row leaves them (before :meth:`commit`)."""
        return lambda path: changes[path] if path in changes else self.read(path)

    def commit(self, changes: dict[bytes, bytes | None]) -> None:
        self._state.update(changes)


def paused_rebase(fork: Path) -> Any:
    """The state of a paused ``port --rebase`` in ``fork`` (pausing.RebaseState), or None."""
    from hyperqwen_patches import gitrun
    from hyperqwen_patches.port import pausing

    return pausing.load(gitrun.git_dir_of(fork))


def abort_rebase(fork: Path) -> tuple[Any, list[Path]]:
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
    git_dir: Path, manifest: Any, report: PortReport, request: RebaseRequest
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
    manifest: Any,
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


def _rebase(
    manifest: Any,
    report: PortReport,
    rows: Sequence[PortRow],
    old: PristineTree,
    new: PristineTree,
    request: RebaseRequest,
    sources: tuple[str | None, str | None],
    git_dir: Path,
) -> RebaseResult:
    from hyperqwen_patches.errors import GitError
    from hyperqwen_patches.fork import importing, replay
    from hyperqwen_patches.fork import reading as forkgit
    from hyperqwen_patches.fork.commitstream import CommitStream
    from hyperqwen_patches.port import pausing
    from hyperqwen_patches.port.pristinediff import PristinePair
    from hyperqwen_patches.port.threeway import FileMerge, merge_row
    from hyperqwen_patches.port.triage import attempt_row, touched_paths
    from hyperqwen_patches.port.verify import RebaseChecks
    from hyperqwen_patches.sources import basecommit

    saved = pausing.load(git_dir)
    messages = _fork_messages(git_dir, manifest)
    from_patch_files = not messages
    commits: list[tuple[str, str, CommitHow]] = []
    merged: list[tuple[str, tuple[bytes, ...]]] = []
    adjacent: list[tuple[str, bytes, int, str]] = []  # (row, file, line, what): read these
    upstream: list[str] = []
    skipped: list[str] = []
    names = [r.name for r in rows]
    done_with: Path | None = None  # the worktree of the row --continue/--skip just took
    paused: Paused | None = None
    with forkgit.lazy_scratch_repo() as view, CommitStream(git_dir) as stream:
        if request.action == "start":
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
            parent = base
            state = replay.TreeState(replay.tree_entries(git_dir, base), new.read)
            start = 0
        else:
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
            branch, previous, base = saved.branch, saved.previous, saved.base
            _refuse_checked_out(git_dir, branch, request.fork)
            commits = [(r, c, h) for r, c, h in saved.commits]  # type: ignore[misc]
            merged = [(r, tuple(p.encode("utf-8", "surrogateescape") for p in ps))
                      for r, ps in saved.merged]  # fmt: skip
            adjacent = [(r, p.encode("utf-8", "surrogateescape"), n, w)
                        for r, p, n, w in saved.adjacent]  # fmt: skip
            upstream, skipped = list(saved.upstream), list(saved.skipped)
            from_patch_files = saved.messages_from == "patch files"
            if request.action == "skip":
                parent = saved.parent
                skipped.append(saved.row)
            else:
                message, env, built = _message(view, manifest, messages, saved.row)
                from_patch_files |= built
                conflicted = [f["path"] for f in saved.files if f["how"] == "conflict"] or [
                    f["path"] for f in saved.files
                ]
                note = (
                    f"Ported to {report.package} {report.to_version} by hand: "
                    f"{', '.join(conflicted)} resolved in a three-way merge."
                )
                parent, _ = pausing.take_resolution(
                    git_dir, saved, _with_port_note(message, note.encode()), env
                )
                commits.append((saved.row, parent, "resolved"))
            # The person's worktree goes only once what it gave is recorded: in the next pause's
            # state or in the branch (a kill in between loses no resolution).
            done_with = Path(saved.worktree)
            state = replay.state_of_commit(git_dir, parent, known=new.read, base=base)
            start = names.index(saved.row) + 1

        pair = PristinePair(old, new)
        old_side = _OldSide(old)
        for row in rows[:start]:
            if row.patch is not None:
                old_side.commit(old_side.step(row)[0])
        labels = (
            f"{report.package} {report.to_version} + rows before",
            f"{report.package} {report.from_version} + rows before",
            "",
        )
        # Every row written (at fuzz 0, at an offset or merged) is checked as written: a clean merge
        # can still leave a name the release renamed, a call that no longer binds or a copied body
        # upstream changed (port/verify.py).
        checks = RebaseChecks(
            manifest.package,
            old.read,
            old.paths,
            new.read,
            old_label=labels[1],
            new_label=f"{report.package} {report.to_version} + rows",
            accept=[a.name for a in manifest.accepted_names],
        )

        def pause(row: PortRow, files: Sequence[FileMerge], findings: Sequence[str]) -> Paused:
            """Save the state, then put the row's files in the worktree for a person."""
            worktree = (request.worktree or pausing.default_worktree(
                request.fork, git_dir, report.to_version)).resolve()  # fmt: skip
            # Runnable from anywhere (the person is likely in the worktree).
            resume = f"hyperqwen-patches port --rebase --continue --fork {request.fork}" + (
                f" --repo {request.repo}" if request.repo is not None else ""
            )
            if worktree != done_with:
                pausing.refuse_existing(worktree)
            # The commits so far into the object store before the state names them.
            stream.close()
            pausing.save(
                git_dir,
                pausing.RebaseState(
                    to_version=report.to_version,
                    branch=branch,
                    previous=previous,
                    base=base,
                    parent=parent,
                    row=row.name,
                    worktree=str(worktree),
                    files=[f.to_json() for f in files],
                    to_source=sources[0],
                    from_source=sources[1],
                    commits=[list(c) for c in commits],
                    merged=[[r, [show(p) for p in ps]] for r, ps in merged],
                    adjacent=[[r, show(p), n, w] for r, p, n, w in adjacent],
                    upstream=upstream,
                    skipped=skipped,
                    messages_from="patch files" if from_patch_files else "fork",
                    findings=list(findings),
                ),
            )
            # A failure from here on leaves the state: --abort removes what was made.
            if done_with is None or not (
                worktree == done_with and pausing.move_worktree(git_dir, worktree, parent, files)
            ):
                if done_with is not None:
                    pausing.close_worktree(git_dir, done_with)
                pausing.open_worktree(git_dir, worktree, parent, files)
            return Paused(row.name, worktree, tuple(files), resume, tuple(findings))

        for row in rows[start:]:
            if row.patch is None:
                continue
            old_changes, old_modes = old_side.step(row)
            attempt = attempt_row(row.patch, state.read, pair)
            note = ""
            if attempt.status == "upstream":
                upstream.append(row.name)
                old_side.commit(old_changes)
                continue
            paths = touched_paths(row.patch)
            before = {path: state.read(path) for path in paths}
            merge = None
            if attempt.status != "conflicts":
                assert attempt.carried is not None
                replay.apply_row(state, attempt.carried, row=row.name)
                how: CommitHow = "applied"
                if attempt.status == "partly-upstream":
                    how = "partly-upstream"
                    dropped = ", ".join(
                        f"{show(h.path)} hunk #{h.number}"
                        for h in attempt.hunks
                        if h.status == "upstream"
                    )
                    note = (
                        f"Ported to {report.package} {report.to_version}: {dropped} dropped, "
                        "already upstream."
                    )
            else:
                merge = merge_row(
                    paths,
                    old_side.read,
                    old_side.reader_after(old_changes),
                    state.read,
                    (labels[0], labels[1], f"row {row.name}"),
                )
                if not merge.clean:
                    paused = pause(row, merge.files, ())
                    break
                state.apply_changes(row.patch, {f.path: f.content for f in merge.files}, old_modes)
                how = "merged"
                both = merge.merged_paths
                merged.append((row.name, both))
                note = f"Ported to {report.package} {report.to_version} by a three-way merge" + (
                    f"; both sides changed {', '.join(show(p) for p in both)}." if both else "."
                )
                sites = [(row.name, p, n, w) for p, n, w in merge.adjacent]
                adjacent += sites
                if sites:
                    note += " Merged next to an upstream change (review): " + ", ".join(
                        f"{show(p)}:{n}" for _, p, n, _ in sites
                    )
                    note += "."
            written = checks.check(
                row.name,
                paths,
                old_side.read,
                old_side.reader_after(old_changes),
                lambda path, before=before: before[path] if path in before else state.read(path),
                state.read,
            )
            if not written.ok:
                # As a conflict does: the row's files as written, for a person, with the findings.
                files = merge.files if merge is not None else tuple(
                    FileMerge(path, state.read(path), "row")
                    for path in paths
                    if state.read(path) != before[path]
                )  # fmt: skip
                if merge is not None:
                    merged.pop()
                    adjacent[:] = [site for site in adjacent if site[0] != row.name]
                paused = pause(row, files, written.lines())
                break
            old_side.commit(old_changes)
            message, env, built = _message(view, manifest, messages, row.name)
            from_patch_files |= built
            if note:
                message = _with_port_note(message, note.encode())
            parent = importing.write_state_commit(
                git_dir, state, parent, message, env, stream=stream
            )
            commits.append((row.name, parent, how))
        stream.close()
    if paused is None:
        _write_branch(git_dir, branch, parent, previous, report.to_version)
        if done_with is not None:
            pausing.close_worktree(git_dir, done_with)
        pausing.drop(git_dir)
    return RebaseResult(
        fork=request.fork,
        branch=branch,
        base=base,
        tip=parent,
        previous=previous,
        commits=tuple(commits),
        upstream=tuple(upstream),
        messages_from="patch files" if from_patch_files else "fork",
        state="done" if paused is None else "paused",
        merged=tuple(merged),
        adjacent=tuple(adjacent),
        skipped=tuple(skipped),
        paused=paused,
    )


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

"""``import``: build each export point's fork branch from the pristine base and the series.

One commit per active row, in manifest order, on top of the deterministic base commit:

- the tree is the engine's result of applying the row at fuzz 0 (the same code as ``apply`` and
  ``check``), so the fork is what the Docker image installs, not what ``git apply`` would guess;
- the message, author and author date come from the patch file's email header (read by
  ``git mailinfo``, as ``git am`` reads it); a plain diff without one gets the row's name and
  ``what`` as its subject and its preamble (what ``git am`` reads as the message) as its body;
  a module-file row gets ``<name>: add module files``;
- the committer is fixed (``hyperqwen-patches``), its date is the author date, and every message ends
  with the ``Hqp-Row: <name>`` trailer (added when the patch file lacks it);

so the same input gives the same SHAs on any machine. Objects are written into the target repository's
object store; the only ref touched is the export point's branch (``update-ref`` with the old value, so a
concurrent change is not overwritten). The work tree, index, HEAD and config are never touched.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hyperqwen_patches import gitrun
from hyperqwen_patches.errors import GitError, UsageError
from hyperqwen_patches.fork import reading as forkgit
from hyperqwen_patches.fork import treestate
from hyperqwen_patches.fork.commitstream import CommitStream
from hyperqwen_patches.records import field, record
from hyperqwen_patches.series.manifestmodel import ExportPoint, Manifest, Row
from hyperqwen_patches.sources import basecommit

if TYPE_CHECKING:
    from hyperqwen_patches.engine.patchmodel import Patch

_DATE_RE = re.compile(rb"^(?P<ts>\d+) (?P<tz>[+-]\d{4})$")


@record(frozen=True)
class ImportedRow:
    row: str
    commit: str


@record
class ImportResult:
    export_point: str
    branch: str
    base: str
    tip: str
    previous: str | None  # the branch's value before (None: created)
    rows: list[ImportedRow] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.previous != self.tip


@record(frozen=True)
class MailHeader:
    author_name: bytes
    author_email: bytes
    date: str  # git's "<unix> <tz>" form
    message: bytes


def rows_of(manifest: Manifest, point: ExportPoint) -> list[Row]:
    """The active rows of an export point, in order (a row without one belongs to the first point)."""
    return list(manifest.rows_on(point.name))


def read_mail(view: Path, data: bytes, *, row: Row) -> MailHeader | None:
    """The commit a patch file describes (``git mailinfo``, as ``git am``); None for a bare diff."""
    return _mail_of(view, *_mailinfo(view, data, row=row), row=row)


def _mailinfo(view: Path, data: bytes, *, row: Row) -> tuple[dict[bytes, bytes], bytes]:
    """``git mailinfo``'s header fields and message body of a patch file. For a bare diff the body
    is its preamble up to where ``git am`` would take the diff to start (a ``---`` line, ``diff -``,
    ``Index:``)."""
    with tempfile.TemporaryDirectory(prefix="hqp-mail-") as tmp:
        msg, patch = Path(tmp) / "msg", Path(tmp) / "patch"
        # -b: strip only "[PATCH...]" brackets from the subject, not "[kvarn]"; --encoding: UTF-8 out.
        info = gitrun.check(
            ["mailinfo", "-b", "--encoding=UTF-8", "--no-scissors", str(msg), str(patch)],
            git_dir=view,
            input=data,
            what=f"reading the header of {row.patch}",
        )
        body = msg.read_bytes()
    fields: dict[bytes, bytes] = {}
    for line in info.split(b"\n"):
        key, sep, value = line.partition(b": ")
        if sep:
            fields[key] = value
    return fields, body


def _mail_of(view: Path, fields: dict[bytes, bytes], body: bytes, *, row: Row) -> MailHeader | None:
    subject = fields.get(b"Subject", b"").strip()
    if not subject or not fields.get(b"Email"):
        return None
    date = _git_date(view, fields.get(b"Date", b""), row=row)
    message = stripspace(subject + b"\n\n" + body)
    return MailHeader(fields.get(b"Author", b"").strip(), fields[b"Email"].strip(), date, message)


_MONTHS = {
    m: i for i, m in enumerate(b"Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), 1)
}
# The one shape `git format-patch` writes ("Thu, 4 Dec 2026 10:00:00 +0100"): read here. Any other
# goes to git's own parser.
_RFC2822 = re.compile(
    rb"(?:[A-Z][a-z]{2}, )?([0-9]{1,2}) ([A-Z][a-z]{2}) ([0-9]{4}) "
    rb"([0-9]{2}):([0-9]{2}):([0-9]{2}) ([+-])([0-9]{2})([0-9]{2})"
)


def _rfc2822_date(value: bytes) -> str | None:
    """``<unix> <tz>`` of a plain RFC 2822 date, as git computes it; None for any other shape."""
    import calendar
    import datetime

    m = _RFC2822.fullmatch(value.strip())
    if m is None or m[2] not in _MONTHS:
        return None
    day, year, hour, minute, second = (int(m[i]) for i in (1, 3, 4, 5, 6))
    try:  # a date that does not exist (Feb 30, second 60) is git's to judge
        when = datetime.datetime(year, _MONTHS[m[2]], day, hour, minute, second)
    except ValueError:
        return None
    if not 1970 <= year < 2100 or int(m[9]) >= 60:
        return None
    offset = (int(m[8]) * 60 + int(m[9])) * 60 * (1 if m[7] == b"+" else -1)
    stamp = calendar.timegm(when.timetuple()) - offset
    return f"{stamp} {m[7].decode()}{m[8].decode()}{m[9].decode()}"


def _git_date(view: Path, value: bytes, *, row: Row) -> str:
    """An RFC 2822 date as git's ``<unix> <tz>``: the plain shape read here, any other by ``git var``
    with GIT_AUTHOR_DATE set, which normalises exactly as commit-tree would (a process per row was
    a third of an import's time)."""
    if not value:
        return basecommit.BASE_DATE
    plain = _rfc2822_date(value)
    if plain is not None:
        return plain
    out = gitrun.check(
        ["var", "GIT_AUTHOR_IDENT"],
        git_dir=view,
        env={"GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x@x", "GIT_AUTHOR_DATE": value.decode()},
        what=f"reading the date of {row.patch}",
    )
    stamp = out.strip().rsplit(b"> ", 1)[-1]
    if not _DATE_RE.match(stamp):
        raise UsageError(f"{row.patch}: unreadable Date: {value.decode(errors='replace')}")
    return stamp.decode()


def stripspace(message: bytes) -> bytes:
    """git's own message clean-up (what ``git am`` and ``git commit`` do: ``git stripspace``, here
    without a process): trailing whitespace (space, tab, CR) off every line, runs of empty lines
    made one, none at the start or the end, every line ending in a newline."""
    lines: list[bytes] = []
    empties = 0
    for line in message.split(b"\n"):
        line = line.rstrip(b" \t\r\n")
        if not line:
            empties += 1
            continue
        if empties and lines:
            lines.append(b"")
        empties = 0
        lines.append(line)
    return b"".join(line + b"\n" for line in lines)


def with_trailer(message: bytes, row: str) -> bytes:
    """The message ending with ``Hqp-Row: <row>``; an existing trailer must name the same row."""
    named = forkgit.row_trailer(message)
    if named == row:
        return message
    if named is not None:
        raise UsageError(f"row {row}: the patch file's message names row {named} (Hqp-Row trailer)")
    return message.rstrip(b"\n") + b"\n\n" + forkgit.ROW_TRAILER + b": " + row.encode() + b"\n"


def commit_for_row(view: Path, manifest: Manifest, row: Row) -> tuple[bytes, dict[str, str]]:
    """(message, identity env) of a row's commit."""
    if row.is_module:
        message = f"{row.name}: add module files\n\n{row.what}\n".encode()
        env = basecommit.fixed_identity_env()
    else:
        assert row.patch is not None
        from hyperqwen_patches.inputfile import read_repo_file

        try:
            data = read_repo_file(manifest.root / row.patch, "the patch file", shown=row.patch)
        except (ValueError, FileNotFoundError) as exc:
            raise UsageError(f"row {row.name}: {exc}") from None
        fields, body = _mailinfo(view, data, row=row)
        mail = _mail_of(view, fields, body, row=row)
        if mail is None:
            # A bare diff's preamble prose is the commit's body (cleaned as git cleans a message),
            # so export writes it back and a re-import of that file reads the same message.
            message = stripspace(f"{row.name}: {row.what}\n\n".encode() + body)
            env = basecommit.fixed_identity_env()
        else:
            message = mail.message
            env = basecommit.fixed_identity_env(mail.date)
            env["GIT_AUTHOR_NAME"] = mail.author_name.decode("utf-8", "surrogateescape")
            env["GIT_AUTHOR_EMAIL"] = mail.author_email.decode("utf-8", "surrogateescape")
    return with_trailer(message, row.name), env


def write_state_commit(
    git_dir: Path,
    state: treestate.TreeState,
    parent: str,
    message: bytes,
    env: dict[str, str],
    *,
    stream: CommitStream | None = None,
) -> str:
    """A commit on ``parent`` of what changed in the state since its last commit; ``stream`` writes
    it (one git process for a whole chain), else a stream of its own."""
    if stream is not None:
        return stream.commit(parent, state.take_changes(), message, env)
    with CommitStream(git_dir) as own:
        return own.commit(parent, state.take_changes(), message, env)


def build_branch(
    git_dir: Path,
    manifest: Manifest,
    point: ExportPoint,
    tree: basecommit.TreeSource,
    patches: Mapping[str, Patch],
    base: str,
) -> list[ImportedRow]:
    """Write one commit per row of ``point`` on ``base`` into ``git_dir``; return them in order."""
    state = treestate.TreeState(treestate.tree_entries(git_dir, base), tree.read)
    parent = base
    out: list[ImportedRow] = []
    with forkgit.scratch_repo() as view, CommitStream(git_dir) as stream:
        for row in rows_of(manifest, point):
            treestate.apply_row(state, patches[row.name], row=row.name)
            message, env = commit_for_row(view, manifest, row)
            parent = write_state_commit(git_dir, state, parent, message, env, stream=stream)
            out.append(ImportedRow(row.name, parent))
    return out


def import_series(
    manifest: Manifest,
    repo: Path,
    *,
    tree: basecommit.TreeSource,
    export_points: Sequence[str] = (),
    force: bool = False,
    create: bool = False,
) -> list[ImportResult]:
    """Build every (or the named) export point's branch in ``repo``; return what each ref became."""
    from hyperqwen_patches.series.rows import build_patch

    if not manifest.export_points:
        raise UsageError(
            f"{manifest.path}: the manifest names no export point",
            hint="add export_points: [{name: ..., branch: ...}] (docs/manifest.md)",
        )
    points = list(manifest.export_points)
    if export_points:
        unknown = [n for n in export_points if manifest.export_point(n) is None]
        if unknown:
            raise UsageError(f"unknown export point(s): {', '.join(unknown)}")
        points = [p for p in points if p.name in export_points]
    if not repo.exists() and not create:
        raise UsageError(
            f"{repo}: no such repository", hint="pass --create to make a new one there"
        )
    if not repo.exists() and create:
        repo.mkdir(parents=True)
        gitrun.check(
            # GIT_DIR named explicitly (an inherited one must not be re-initialised); cwd is the work tree.
            ["init", "--quiet"],
            git_dir=repo.resolve() / ".git",
            cwd=repo.resolve(),
            # The work tree named too: one left in the environment (GIT_WORK_TREE, as a git hook
            # sets it) would otherwise stand in for it, and init fails on a path that is not there.
            env={"GIT_WORK_TREE": str(repo.resolve())},
            what=f"creating {repo}",
        )
    git_dir = gitrun.git_dir_of(repo)
    patches = {r.name: build_patch(manifest, r) for r in manifest.active_rows}
    head = gitrun.run(["symbolic-ref", "--quiet", "HEAD"], git_dir=git_dir).stdout.strip()
    results: list[ImportResult] = []
    planned: list[tuple[ExportPoint, str, list[ImportedRow], str | None]] = []
    base = basecommit.base_commit_in(
        # A tree without a label (a test's dict) is written, not looked up in the cache.
        git_dir,
        tree,
        label=getattr(tree, "label", None),
        package=manifest.package,
        version=manifest.pin,
    )  # once for every export point: they all grow from the pin's base
    for point in points:
        rows = build_branch(git_dir, manifest, point, tree, patches, base)
        tip = rows[-1].commit if rows else base
        ref = f"refs/heads/{point.branch}"
        previous = forkgit.resolve(git_dir, ref, what="import")
        if previous is not None and previous != tip and not force:
            raise GitError(
                f"branch {point.branch} exists at {previous[:12]}, not at the imported {tip[:12]}",
                hint="pass --force to move it (its old commits stay reachable from the reflog)",
            )
        if previous != tip and head == ref.encode() and not _is_bare(git_dir):
            raise GitError(
                f"branch {point.branch} is checked out in {repo}; import never moves a checked-out "
                "branch (the work tree would no longer match it)",
                hint="switch to another branch first, or import into another repository",
            )
        planned.append((point, tip, rows, previous))
        results.append(ImportResult(point.name, point.branch, base, tip, previous, rows))
    for point, tip, _rows, previous in planned:
        if previous != tip:
            gitrun.check(
                [
                    "update-ref",
                    "-m",
                    "hyperqwen-patches import",
                    f"refs/heads/{point.branch}",
                    tip,
                    previous or "0" * 40,
                ],
                git_dir=git_dir,
                what=f"updating {point.branch}",
            )
    return results


def _is_bare(git_dir: Path) -> bool:
    out = gitrun.check(["rev-parse", "--is-bare-repository"], git_dir=git_dir, what="reading")
    return out.strip() == b"true"

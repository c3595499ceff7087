"""A chain of commits written through one ``git fast-import``.

``import`` and ``port --rebase`` write one commit per row. Written object by object (``fast-import``
for the blobs, ``update-index`` + ``write-tree`` on a temporary index of the whole tree, then
``commit-tree``), that was six git processes and a full-tree index per row: most of a 50-row import's
time, and growing with the size of the tree (vLLM holds 4,886 files). Here a single ``fast-import``
takes every commit of the run as the row's changed paths only (``M``/``D`` on top of its parent),
and ``get-mark`` answers each commit's SHA as soon as it is written, so callers go on as before.

The commits are the ones ``commit-tree`` writes, byte for byte: the same tree, parents, identity and
message, no encoding header, no signature. Identities are cleaned as git cleans them (``ident.c``:
leading and trailing "crud" dropped, ``<``, ``>`` and newlines removed) and dates must already be
git's raw ``<unix seconds> <+hhmm>``, as every date this tool builds is.

Objects become visible to other git processes when the stream is closed (``fast-import`` keeps them
in its pack until then). No ref is written: the one ref a ``commit`` command needs is reset to nothing
before the end, and ``fast-import`` writes refs only at the end. A run stopped half-way leaves
unreferenced objects at most (``git gc`` drops them), never a ref.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

from hyperqwen_patches import gitrun
from hyperqwen_patches.errors import GitError, UsageError

# fast-import needs a ref to commit on; it is reset before the end, so it is never written.
_SCRATCH_REF = b"refs/hyperqwen-patches/commit-stream"
_RAW_DATE = re.compile(r"\A-?[0-9]+ [+-][0-9]{4}\Z")
_CRUD = frozenset(range(33)) | frozenset(b".,:;<>\"\\'")


def clean_ident_part(value: bytes) -> bytes:
    """A name or e-mail address as git writes it into a commit (``strbuf_addstr_without_crud``)."""
    start, end = 0, len(value)
    while start < end and value[start] in _CRUD:
        start += 1
    while end > start and value[end - 1] in _CRUD:
        end -= 1
    return bytes(c for c in value[start:end] if c not in b"\n<>")


def ident_lines(env: Mapping[str, str]) -> bytes:
    """The ``author`` and ``committer`` lines of a commit from the ``GIT_AUTHOR_*`` and
    ``GIT_COMMITTER_*`` variables that ``commit-tree`` would read."""
    out = b""
    for role in ("AUTHOR", "COMMITTER"):
        name = clean_ident_part(env[f"GIT_{role}_NAME"].encode("utf-8", "surrogateescape"))
        email = clean_ident_part(env[f"GIT_{role}_EMAIL"].encode("utf-8", "surrogateescape"))
        date = env[f"GIT_{role}_DATE"]
        if not name:
            raise UsageError(f"GIT_{role}_NAME {env[f'GIT_{role}_NAME']!r}: no usable name in it")
        if not _RAW_DATE.match(date):
            raise UsageError(f"GIT_{role}_DATE {date!r}: not git's raw '<seconds> <+hhmm>'")
        out += b"%s %s <%s> %s\n" % (role.lower().encode(), name, email, date.encode())
    return out


Change = tuple[bytes, int | None, bytes | str | None]
"""(path, mode, content): content bytes (a new blob), a blob SHA (an existing blob, e.g. only the mode
changed), or None with mode None (the path is deleted)."""


class CommitStream:
    """``with CommitStream(git_dir) as stream: sha = stream.commit(parent, changes, message, env)``."""

    def __init__(self, git_dir: Path) -> None:
        self._git_dir = git_dir
        self._proc: subprocess.Popen[bytes] | None = None
        self._err: IO[bytes] | None = None
        self._marks = 0
        # fast-import finds a commit of its own run by its mark only, not by its SHA.
        self._mark_of: dict[str, int] = {}

    def __enter__(self) -> CommitStream:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.close()
            return
        with contextlib.suppress(GitError):  # the error already on its way says what went wrong
            self.close()

    def _start(self) -> None:
        self._err = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close(), with the process
        self._proc = gitrun.start(
            ["fast-import", "--quiet", "--done", "--date-format=raw"],
            git_dir=self._git_dir,
            stderr=self._err,
            # Speed over size: the pack of one run is small and `git gc` recompresses it.
            config=(("core.compression", "1"), ("pack.compression", "1")),
        )

    def _send(self, data: bytes) -> None:
        if self._proc is None:
            self._start()
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        try:
            proc.stdin.write(data)
        except BrokenPipeError:
            self._fail()

    def _fail(self) -> None:
        proc, err = self._proc, self._err
        assert proc is not None and err is not None
        proc.kill()
        proc.wait()
        err.seek(0)
        detail = err.read().decode("utf-8", "replace").strip()
        self._proc = None
        self._mark_of.clear()
        raise GitError(f"git fast-import failed writing commits: {detail or 'no message'}")

    def commit(
        self, parent: str, changes: Iterable[Change], message: bytes, env: Mapping[str, str]
    ) -> str:
        """Write a commit of ``parent``'s tree with ``changes``; return its SHA."""
        self._marks += 1
        mark = self._marks
        out = bytearray(b"commit %s\nmark :%d\n" % (_SCRATCH_REF, mark))
        out += ident_lines(env)
        source = b":%d" % self._mark_of[parent] if parent in self._mark_of else parent.encode()
        out += b"data %d\n%s\nfrom %s\n" % (len(message), message, source)
        for path, mode, content in changes:
            if b"\n" in path:
                raise UsageError(f"{path!r}: a path with a newline cannot be committed")
            quoted = b'"%s"' % path.replace(b"\\", b"\\\\").replace(b'"', b'\\"')
            if content is None:
                out += b"D %s\n" % quoted
            elif isinstance(content, str):
                out += b"M %o %s %s\n" % (mode or 0o100644, content.encode(), quoted)
            else:
                out += b"M %o inline %s\ndata %d\n" % (mode or 0o100644, quoted, len(content))
                out += content + b"\n"
        out += b"\nget-mark :%d\n" % mark
        self._send(bytes(out))
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        assert proc.stdout is not None
        try:
            proc.stdin.flush()
        except BrokenPipeError:
            self._fail()
        answer = proc.stdout.readline().strip()
        if not re.fullmatch(rb"[0-9a-f]{40}", answer):
            self._fail()
        sha = answer.decode()
        self._mark_of[sha] = mark
        return sha

    def close(self) -> None:
        """Finish the stream: every commit written is in the object store after this."""
        proc, err = self._proc, self._err
        self._proc = None
        self._mark_of.clear()
        if proc is None:
            return
        assert proc is not None and proc.stdin is not None and err is not None
        try:
            proc.stdin.write(b"reset %s\n\ndone\n" % _SCRATCH_REF)
            proc.stdin.close()
        except BrokenPipeError:
            pass
        code = proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
        err.seek(0)
        detail = err.read().decode("utf-8", "replace").strip()
        err.close()
        if code != 0:
            raise GitError(f"git fast-import failed writing commits: {detail or f'exit {code}'}")

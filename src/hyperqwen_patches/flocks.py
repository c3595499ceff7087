"""Advisory locks (``flock``) between runs: taken at once when free; when another run holds one, the
caller's choice: refuse at once with its one-line message, wait up to some seconds and then refuse, or
wait as long as it takes (showing that it waits). The kernel drops a lock when its holder exits, killed
or not, so a lock never outlives the run that took it.

The callers: DIR's lock for ``apply`` (bounded wait, ``sources/tree.py``), a cache entry's lock
(unbounded, ``cachedir.entry_lock``), the fork's row-command lock (refused at once,
``fork/rowjournal.py``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

TYPE_CHECKING = False  # not typing's: DIR's lock is on apply's start-up path
if TYPE_CHECKING:
    from contextlib import AbstractContextManager


def take(
    fd: int,
    *,
    shared: bool = False,
    wait: float | None,
    busy: Callable[[], BaseException] | None = None,
    waiting: Callable[[], AbstractContextManager[None]] | None = None,
) -> None:
    """Lock the open file ``fd`` (exclusive unless ``shared``). Held by another run: with ``wait``
    None, wait for it, inside ``waiting()`` when given (a progress line); with ``wait`` seconds (0:
    none), try until then, then raise ``busy()``, the caller's message naming what is locked."""
    op = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    deadline = None if wait is None else time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if deadline is None:
                with waiting() if waiting is not None else contextlib.nullcontext():
                    fcntl.flock(fd, op)
                return
            left = deadline - time.monotonic()
            if left <= 0:
                assert busy is not None, "a bounded wait needs the message to give up with"
                raise busy() from None
            time.sleep(min(0.02, left))


@contextlib.contextmanager
def exclusive(
    path: Path,
    *,
    wait: float | None,
    busy: Callable[[], BaseException] | None = None,
    waiting: Callable[[], AbstractContextManager[None]] | None = None,
) -> Iterator[None]:
    """Hold the exclusive lock of the file ``path`` (created if missing, in a directory that exists;
    left in place afterwards: removing a lock file races the next run, which may have it open).
    ``wait``, ``busy`` and ``waiting``: as :func:`take`."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        take(fd, wait=wait, busy=busy, waiting=waiting)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)

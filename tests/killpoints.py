"""Run the command line with a signal planted at one exact point of a write, for the kill tests.

``python tests/killpoints.py POINT ARGS...`` runs ``hyperqwen-patches ARGS...`` in this process and
sends it a signal (SIGKILL unless the point names another) when the write reaches POINT:

- ``journal-write``: half of the journal's bytes are written (to whatever file it is written first);
- ``journal-rename``: the journal is complete but not yet renamed into place;
- ``journal-renamed``: it was just renamed into place (its directory not yet fsynced);
- ``rename:N`` / ``rename:N:TERM``: the N-th file was just renamed into place (the journal's own
  rename not counted);
- ``commit``: every file is in place, the journal is about to be removed.

The points are found at the system-call wrappers (``os.write``, ``os.rename``, ``os.replace``,
``os.unlink``), not in the tool's own functions, so a writer that does it differently (a journal
written in place, say) still meets them; a point never reached leaves the run to finish, which the
tests notice (the exit status is not the signal's).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

JOURNAL = b".hqp-journal"


def _name(arg: Any) -> bytes:
    return os.path.basename(os.fsencode(arg))


def _in_root(fd: int, root: bytes) -> bool:
    try:
        target = os.readlink(b"/proc/self/fd/%d" % fd)
    except OSError:
        return False
    return os.path.dirname(target) == root and os.path.basename(target).startswith(b".hqp")


def main() -> None:
    point, *args = sys.argv[1:]
    kind, _, rest = point.partition(":")
    count, _, signame = rest.partition(":")
    sig = signal.Signals["SIG" + signame] if signame else signal.SIGKILL
    root = os.path.realpath(os.fsencode(args[1]))  # `apply DIR ...`
    lock = threading.Lock()
    renames = [0]

    def stop() -> None:
        os.kill(os.getpid(), sig)
        if sig == signal.SIGKILL:
            threading.Event().wait()  # never returns: the kill lands first

    real_write = os.write

    def write(fd: int, data: Any) -> int:
        if kind == "journal-write" and _in_root(fd, root) and len(data) > 1:
            real_write(fd, bytes(data[: len(data) // 2]))
            stop()
        return real_write(fd, data)

    def renamer(real: Callable[..., None]) -> Callable[..., None]:
        def rename(src: Any, dst: Any, **kw: Any) -> None:
            journal = _name(dst) == JOURNAL
            if journal and kind == "journal-rename":
                stop()
            real(src, dst, **kw)
            if journal and kind == "journal-renamed":
                stop()
            if not journal and kind == "rename":
                with lock:
                    renames[0] += 1
                    hit = renames[0] == int(count)
                if hit:
                    stop()

        return rename

    real_unlink = os.unlink

    def unlink(path: Any, **kw: Any) -> None:
        if kind == "commit" and _name(path) == JOURNAL:
            stop()
        real_unlink(path, **kw)

    os.write = write
    os.rename = renamer(os.rename)
    os.replace = renamer(os.replace)
    os.unlink = unlink
    from hyperqwen_patches import cli

    sys.argv = ["hyperqwen-patches", *args]
    cli.main()


if __name__ == "__main__":
    main()

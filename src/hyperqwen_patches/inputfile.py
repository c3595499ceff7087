"""Reading a file a user names as input (a patch, a series list): bounded, and only what ends.

A device (``/dev/zero``) would be read until memory runs out and a multi-GB file named by mistake
would be held whole: both are refused, naming the file, before anything is parsed. A pipe is read
where the user names one (``--patch <(git diff)``): it ends, and the bound holds there too. A file of
the repository (the manifest, a row's patch, ``patches/series``, ``docker/requirements.txt``) is
read with ``pipes=False``: a FIFO there has no writer, and opening it would wait forever.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

# vLLM's largest release diff is a few MB; the 1,000-patch benchmark series is 3 MB in all.
MAX_INPUT_BYTES = 1 << 30


def read_input(path: Path, what: str, *, limit: int = MAX_INPUT_BYTES, pipes: bool = True) -> bytes:
    """The bytes of ``path``; ``ValueError`` naming ``what`` and the path when it is not a regular
    file (or, with ``pipes``, a pipe), or larger than ``limit``. ``OSError`` (missing, a directory,
    unreadable) passes through for the caller to word."""
    mode = path.stat().st_mode
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if not (stat.S_ISREG(mode) or (pipes and stat.S_ISFIFO(mode))):
        kind = "a regular file or a pipe" if pipes else "a regular file"
        raise ValueError(f"{what} {path} is not {kind}")
    with path.open("rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{what} {path} is larger than {limit >> 20} MiB")
    return data


def read_repo_file(path: Path, what: str, *, shown: str | None = None) -> bytes:
    """A file of the repository, read as :func:`read_input` reads with ``pipes=False``; every
    refusal (a directory, a FIFO, a device, too large, unreadable) is one ``ValueError`` line naming
    ``what`` and the path (``shown`` instead, when given: the repository-relative name).
    ``FileNotFoundError`` passes through: a missing file is the caller's finding, worded its own way."""
    name = shown if shown is not None else str(path)
    try:
        return read_input(path, what, pipes=False)
    except FileNotFoundError:
        raise
    except ValueError as exc:
        raise ValueError(str(exc).replace(str(path), name, 1)) from None
    except OSError as exc:
        raise ValueError(f"{what} {name} cannot be read: {exc.strerror or exc}") from None

"""Reading a file a user names as input (a patch, a series list): bounded, and only what ends.

A device (``/dev/zero``) would be read until memory runs out and a multi-GB file named by mistake
would be held whole: both are refused, naming the file, before anything is parsed. A pipe is read
(``--patch <(git diff)``): it ends, and the bound holds there too.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

# vLLM's largest release diff is a few MB; the 1,000-patch benchmark series is 3 MB in all.
MAX_INPUT_BYTES = 1 << 30


def read_input(path: Path, what: str, *, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of ``path``; ``ValueError`` naming ``what`` and the path when it is not a regular
    file or a pipe, or larger than ``limit``. ``OSError`` (missing, a directory, unreadable) passes
    through for the caller to word."""
    mode = path.stat().st_mode
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
        raise ValueError(f"{what} {path} is not a regular file or a pipe")
    with path.open("rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{what} {path} is larger than {limit >> 20} MiB")
    return data

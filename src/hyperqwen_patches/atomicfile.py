"""Write a file of the user's repository atomically: a temporary file beside it, then one rename.

A reader (or a killed run) sees the old bytes or the new ones, never a half-written file; an existing
file keeps its mode, a new one is 0644 (``mkstemp`` alone would make it 0600).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = target.stat().st_mode & 0o777 if target.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

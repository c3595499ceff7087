"""Progress of long steps on stderr (``pristinetree.Progress``): what a person or a CI log sees while a
download, a verification, a base commit or a whole import runs.

On a terminal: rich spinners and a download bar that vanish when done. Anywhere else (a CI log, a
pipe): one line when a step starts and one when it ends, with its time (and a download's size), so a
log never goes silent for half a minute and says where the time went. ``quiet`` prints nothing.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator


def _size(n: int) -> str:
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f} GB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.0f} MB"
    return f"{n / 1024:.0f} kB"


class StderrProgress:
    """Spinners and bars on a terminal; a start line and an end line per step elsewhere."""

    def __init__(self, *, quiet: bool = False) -> None:
        from hyperqwen_patches.console import is_terminal

        self.quiet = quiet
        self.live = not quiet and is_terminal()

    def _say(self, text: str) -> None:
        from hyperqwen_patches.console import err

        err.print(text)

    @contextlib.contextmanager
    def _logged(self, label: str, ended: Callable[[], str] = lambda: "") -> Iterator[None]:
        self._say(f"{label} ...")
        start = time.monotonic()
        try:
            yield
        except BaseException:
            self._say(f"{label}: failed after {time.monotonic() - start:.1f} s")
            raise
        self._say(f"{label}: {ended() or 'done'} in {time.monotonic() - start:.1f} s")

    @contextlib.contextmanager
    def waiting(self, label: str) -> Iterator[None]:
        if self.quiet:
            yield
        elif not self.live:
            with self._logged(label):
                yield
        else:
            from hyperqwen_patches.console import err

            with err.status(label):
                yield

    step = waiting  # a long step of a command (an import, a triage), told the same way

    @contextlib.contextmanager
    def download(self, label: str) -> Iterator[Callable[[int, int | None], None]]:
        if self.quiet:
            yield lambda done, total: None
            return
        if not self.live:
            got = [0]

            def count(done: int, total: int | None) -> None:
                got[0] = done

            with self._logged(label, lambda: _size(got[0]) if got[0] else ""):
                yield count
            return
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TransferSpeedColumn,
        )

        from hyperqwen_patches.console import err

        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeElapsedColumn(),
            console=err.rich,
            transient=True,
        ) as bar:
            task = bar.add_task(label, total=None)

            def update(done: int, total: int | None) -> None:
                bar.update(task, completed=done, total=total)

            yield update

"""The one output sink: data to stdout, diagnostics to stderr.

Consoles are built with ``markup=False, highlight=False, emoji=False`` so user data such as ``[PATCH 1/3]``
is never read as rich markup or recoloured, and ``:smile:`` in a subject stays text, not an emoji.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence

# The one bytes-to-text helper, offered beside the sinks to the code that prints.
from hyperqwen_patches.display import show as show

TYPE_CHECKING = False  # not typing's: a plain run never imports typing (a few ms of every start)
if TYPE_CHECKING:
    from typing import Any, TextIO

    from rich.console import Console


# Off a terminal (CI logs, pipes) rich would wrap at 80 columns, cutting table cells and breaking
# ``file:line: message`` lines mid-token; a log has no width, so there lines are never wrapped.
_LOG_WIDTH = 100_000

# Terminal control characters in what we print (a patch line, a file name, a manifest string) would
# move the cursor, clear the screen or retitle the window: printed as \x1b and so on instead. Tab
# and newline stay. JSON output is not touched (json escapes C0 itself; the data stays exact).
_CONTROL = {
    c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c not in (0x09, 0x0A)
}


def printable(text: str) -> str:
    """``text`` with terminal control characters escaped (see ``_CONTROL``)."""
    return text.translate(_CONTROL)


class Sink:
    """stdout or stderr. Plain text is written straight to the stream (with markup, highlighting and
    emoji off, rich would add nothing to it but its 30 ms import); rich renderables (tables, styled
    text), spinners and ``rich`` itself are created on first use. The stream is looked up at write
    time, so tests that swap ``sys.stdout`` see the output."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._rich: Console | None = None

    @property
    def file(self) -> TextIO:
        stream: TextIO = getattr(sys, self._name)
        return stream

    @property
    def is_terminal(self) -> bool:
        return self.file.isatty()

    @property
    def rich(self) -> Console:
        if self._rich is None:
            from rich.console import Console

            width = None if self.is_terminal else _LOG_WIDTH
            self._rich = Console(
                stderr=self._name == "stderr",
                markup=False,
                highlight=False,
                emoji=False,
                soft_wrap=False,
                width=width,
            )
        return self._rich

    def print(self, *objects: Any, end: str = "\n", **kwargs: Any) -> None:
        if all(isinstance(o, str) for o in objects) and set(kwargs) <= {"soft_wrap"}:
            stream = self.file
            stream.write(printable(" ".join(objects)) + end)
            stream.flush()
            return
        self.rich.print(*objects, end=end, **kwargs)

    def status(self, *args: Any, **kwargs: Any) -> Any:
        return self.rich.status(*args, **kwargs)


out = Sink("stdout")
err = Sink("stderr")


_json_emitted = False


def emit_json(payload: Any) -> None:
    """Print a JSON document to stdout: sorted keys, stable, one trailing newline."""
    import json

    global _json_emitted
    text = json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    # A signal arriving mid-write would leave half a document and then add the error document
    # after it: the write is whole (signals held until it ends), and counts as done from its start.
    _json_emitted = True
    with _signals_held():
        sys.stdout.write(text)
        sys.stdout.flush()


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    import signal

    # Signal masks are the main thread's to set; without threading imported no other thread runs.
    threading = sys.modules.get("threading")
    if threading is not None and threading.current_thread() is not threading.main_thread():
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def json_emitted() -> bool:
    """Whether this process printed its JSON document already (then an error adds none)."""
    return _json_emitted


def is_terminal() -> bool:
    """Spinners and progress bars only when a person is watching stderr."""
    return err.is_terminal


def table_lines(columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[str]]) -> list[str]:
    """A table in rich's look (heavy head, no outer edge), formatted here as plain text.

    ``columns`` are (name, "left" | "right"). rich's Table took 0.44 s for a 1,000-row series
    (measuring and wrapping every cell), more than the checks themselves (docs/performance.md), and
    most of ``apply``'s time; this takes milliseconds. Lines are never wrapped or cut: a terminal
    narrower than the table soft-wraps them.
    """
    widths = [max([len(name)] + [len(r[i]) for r in rows]) for i, (name, _) in enumerate(columns)]

    def line(cells: Sequence[str], sep: str) -> str:
        parts = []
        for cell, width, (_, justify) in zip(cells, widths, columns, strict=True):
            parts.append(cell.rjust(width) if justify == "right" else cell.ljust(width))
        return sep.join(f" {p} " for p in parts)

    head = line([name for name, _ in columns], "┃")
    rule = "╇".join("━" * (w + 2) for w in widths)
    return [head, rule, *(line(r, "│") for r in rows)]


def program() -> str:
    """The name the user ran us by, for hints: ``./hqp`` (the quick start's wrapper says so in
    ``HQP_PROG``), ``hqp`` or ``hyperqwen-patches`` when that is on PATH, ``python -m
    hyperqwen_patches``, else the path typed."""
    import os
    import shutil

    given = os.environ.get("HQP_PROG")
    if given:
        return given
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "hyperqwen-patches"
    if argv0.endswith("__main__.py") or argv0 == "-m":
        return "python -m hyperqwen_patches"
    name = os.path.basename(argv0)
    found = shutil.which(name)
    if found and os.path.realpath(found) == os.path.realpath(argv0):
        return name
    return argv0 if os.sep in argv0 else name


def as_typed(text: str) -> str:
    """``text`` with the commands it suggests (``run: hyperqwen-patches render``) spelled as the user
    runs the tool, so a hint can be pasted as it stands."""
    prog = program()
    if prog == "hyperqwen-patches" or "hyperqwen-patches " not in text:
        return text
    import re

    # A command word follows ("hyperqwen-patches render"); not "hyperqwen-patches 0.1.0" or an email.
    return re.sub(r"\bhyperqwen-patches (?=[a-z][a-z-]*\b)", lambda _: prog + " ", text)

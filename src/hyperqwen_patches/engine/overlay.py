"""A tree with changes over it: the files of a reader, some replaced or deleted by a mapping. Every
"release + rows applied so far" view is one (the engine's series application, the port's old side,
the static checks' target as the series leaves it). Pure: readers in, readers out."""

from __future__ import annotations

from collections.abc import Callable, Mapping

Reader = Callable[[bytes], bytes | None]


def over(changes: Mapping[bytes, bytes | None], read: Reader) -> Reader:
    """``read``'s tree with ``changes`` over it: a path in ``changes`` reads as its value (None: the
    file is gone), any other path as ``read`` has it. ``changes`` is read at each call (a caller
    may keep adding to it)."""

    def reading(path: bytes) -> bytes | None:
        return changes[path] if path in changes else read(path)

    return reading


class Overlay:
    """Pending changes over a reader, with the modes and moves a patch brings: a patch works on a
    :meth:`child`, merged into its parent only if it applied."""

    def __init__(self, read: Reader, base: Mapping[bytes, bytes | None] | None = None) -> None:
        self.changes: dict[bytes, bytes | None] = dict(base or {})
        self.modes: dict[bytes, int] = {}
        self.moved: dict[bytes, bytes] = {}  # rename/copy target -> source (its mode goes along)
        self.read: Reader = over(self.changes, read)

    def child(self) -> Overlay:
        return Overlay(self.read)

    def merge(self, child: Overlay) -> None:
        self.changes.update(child.changes)
        self.modes.update(child.modes)
        for target, source in child.moved.items():
            self.moved[target] = self.moved.get(source, source)

"""Line provenance through the series: which row introduced which line of each patched file.

The static checks report per row, so every line of the patched tree needs an owner: ``None`` for a
line of the pristine tree, a row name for a line a row added. The engine already placed every hunk
(``SeriesResult``: each hunk's ``applied_line`` is GNU patch's output line, so its input line is that
minus the file's running output offset); this module replays those placements on labelled lines
instead of bytes, which costs one list walk per touched file and never places a hunk twice. The
bytes it rebuilds are compared with the engine's ``changes``: a disagreement would mean the walk and
the engine read a hunk differently, so that file's labels are dropped (every line unowned) rather
than guessed.

Pure functions on bytes, like the engine: nothing here reads disk or runs git.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from hyperqwen_patches.engine.applying import FileResult, SeriesResult
from hyperqwen_patches.engine.patchmodel import (
    ADDED,
    CONTEXT,
    REMOVED,
    FilePatch,
    Patch,
    split_lines,
)
from hyperqwen_patches.records import field, record

Reader = Callable[[bytes], bytes | None]


@record
class Provenance:
    """The patched files of a series (only those it touches) with an owner per line.

    ``content[path]`` is the patched bytes (None: the series deleted the file); ``owners[path][i]``
    the row that introduced line ``i + 1`` (None: the line is the pristine tree's). ``rows`` lists the
    rows that applied, in order; ``created`` the paths a row created (absent from the pristine tree).
    """

    content: dict[bytes, bytes | None] = field(default_factory=dict)
    owners: dict[bytes, list[str | None]] = field(default_factory=dict)
    rows: list[str] = field(default_factory=list)
    created: set[bytes] = field(default_factory=set)
    untraced: set[bytes] = field(default_factory=set)  # files whose walk disagreed with the engine

    def owner(self, path: bytes, line: int) -> str | None:
        """The row that introduced ``line`` (1-based) of ``path``; None for a pristine line."""
        owners = self.owners.get(path)
        if owners is None or not 1 <= line <= len(owners):
            return None
        return owners[line - 1]

    def owner_of_span(self, path: bytes, first: int, last: int) -> str | None:
        """The first row owning a line in ``first..last``: a multi-line statement belongs to the row
        that wrote any of its lines."""
        for line in range(first, max(first, last) + 1):
            row = self.owner(path, line)
            if row is not None:
                return row
        return None

    def added_lines(self, path: bytes) -> Iterator[tuple[int, str]]:
        """(line, row) for every line of ``path`` a row introduced, in file order."""
        for number, row in enumerate(self.owners.get(path, ()), 1):
            if row is not None:
                yield number, row

    def files(self) -> list[bytes]:
        """The touched paths that exist after the series, sorted."""
        return sorted(p for p, c in self.content.items() if c is not None)


def trace(patches: Sequence[Patch], result: SeriesResult, read: Reader) -> Provenance:
    """Replay ``result``'s placements of ``patches`` (the same series, same order) on owner labels."""
    lines: dict[bytes, list[bytes] | None] = {}
    owners: dict[bytes, list[str | None]] = {}
    prov = Provenance()

    def current(path: bytes) -> list[bytes] | None:
        if path not in lines:
            data = read(path)
            lines[path] = None if data is None else split_lines(data)
            owners[path] = [None] * len(lines[path] or ())
        return lines[path]

    by_name = {p.name: p for p in patches}
    for pr in result.patches:
        patch = by_name.get(pr.name)
        if patch is None or pr.status != "applied":
            continue  # a failed or already-applied row contributes nothing (as in the engine)
        prov.rows.append(pr.name)
        for fp, fr in zip(patch.files, pr.files, strict=True):
            if fr.status != "applied":
                continue
            _replay_file(pr.name, fp, fr, current, lines, owners, prov)
    for path, text in lines.items():
        if path not in result.changes and path not in prov.created:
            continue
        expected = result.changes.get(path)
        got = None if text is None else b"".join(text)
        prov.content[path] = expected
        if got != expected:
            prov.untraced.add(path)
            prov.owners[path] = [None] * len(split_lines(expected or b""))
        elif text is not None:
            prov.owners[path] = owners[path]
    return prov


def _replay_file(
    row: str,
    fp: FilePatch,
    fr: FileResult,
    current: Callable[[bytes], list[bytes] | None],
    lines: dict[bytes, list[bytes] | None],
    owners: dict[bytes, list[str | None]],
    prov: Provenance,
) -> None:
    if fr.action == "create":
        target = fr.path
        current(target)  # registers the pristine state (absent) before overwriting it
        wanted = fp.content
        if wanted is None:
            wanted = b"".join(text for h in fp.hunks for kind, text in h.lines if kind == ADDED)
        lines[target] = split_lines(wanted)
        owners[target] = [row] * len(lines[target] or ())
        prov.created.add(target)
        return
    source = fr.old_path if fr.old_path is not None else fr.path
    text = current(source)
    assert text is not None  # the engine applied it, so the source existed
    labels = owners[source]
    if fr.action == "delete":
        lines[source] = None
        owners[source] = []
        return
    out: list[bytes] = []
    out_labels: list[str | None] = []
    copied = 0
    out_offset = 0
    for hunk, hr in zip(fp.hunks, fr.hunks, strict=True):
        assert hr.applied_line is not None
        where = hr.applied_line - out_offset  # the input line the preimage starts at (1-based)
        first_change = where - 1 + hunk.prefix_context
        out += text[copied:first_change]
        out_labels += labels[copied:first_change]
        i = first_change
        for kind, data in hunk.lines[hunk.prefix_context : len(hunk.lines) - hunk.suffix_context]:
            if kind == CONTEXT:
                out.append(text[i])
                out_labels.append(labels[i])
                i += 1
            elif kind == REMOVED:
                i += 1
            else:
                out.append(data)
                out_labels.append(row)
        copied = i
        out_offset += hunk.new_len - hunk.old_len
    out += text[copied:]
    out_labels += labels[copied:]
    target = fr.path
    if target != source and fr.action == "rename":
        current(target)
        lines[source] = None
        owners[source] = []
    else:
        current(target)
    lines[target] = out
    owners[target] = out_labels

"""Targeted edits of the manifest's text for the row commands (``drop``, ``move``, ``rename``).

Pure functions on the text: each row is the run of lines from its ``- name:`` line to the next row's
(comments above a row travel with it), so the rows' comments, order of keys and quoting are kept,
as export keeps them (``fork/manifestedit.py``). Every result is parsed by the caller before anything
is written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.series.yamlwriting import yaml_scalar

NUMBERED = re.compile(r"\A(?P<dir>(?:.*/)?)(?P<num>\d{4})-(?P<rest>.+)\Z")


def _compose(text: bytes) -> tuple[str, Any]:
    import yaml

    source = text.decode("utf-8")
    return source, yaml.compose(source, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _get(node: Any, key: str) -> Any:
    return next((v for k, v in node.value if k.value == key), None)


def _line_start(source: str, index: int) -> int:
    return source.rfind("\n", 0, index) + 1


def _content_end(source: str, item: Any) -> int:
    """The offset just past the line that holds a row's last value (a block scalar ends at the
    next line's start already)."""
    end = int(item.value[-1][1].end_mark.index)
    if end > 0 and source[end - 1] == "\n":
        return end
    nl = source.find("\n", end)
    return len(source) if nl < 0 else nl + 1


def _rows(source: str, top: Any) -> tuple[Any, list[tuple[str, int, int]]]:
    """The rows node and each row as (name, start, end) character offsets of whole lines. A row
    starts right after the previous row's last line, so the comment lines above it are its own."""
    rows_node = _get(top, "rows")
    if rows_node is None or rows_node.flow_style or not rows_node.value:
        raise UsageError("the manifest's rows are not a block list; change the rows by hand")
    key = next(k for k, _ in top.value if k.value == "rows")
    nl = source.find("\n", key.end_mark.index)
    first = len(source) if nl < 0 else nl + 1
    items = rows_node.value
    starts = [first] + [_content_end(source, item) for item in items[:-1]]
    spans = []
    for i, item in enumerate(items):
        name = _get(item, "name")
        if item.flow_style or name is None:
            raise UsageError(f"manifest line {item.start_mark.line + 1}: a row not in block style")
        end = starts[i + 1] if i + 1 < len(starts) else _content_end(source, item)
        spans.append((str(name.value), starts[i], end))
    return rows_node, spans


def _block(source: str, start: int, end: int) -> str:
    block = source[start:end]
    return block if block.endswith("\n") else block + "\n"


def reorder_rows(text: bytes, order: Sequence[str], *, drop: Sequence[str] = ()) -> bytes:
    """The rows in ``order`` (every row not in ``drop``, each once)."""
    source, top = _compose(text)
    _, spans = _rows(source, top)
    by_name = {name: (start, end) for name, start, end in spans}
    kept = [name for name, _, _ in spans if name not in drop]
    if sorted(order) != sorted(kept):
        raise UsageError("internal: a row order that is not a permutation of the rows")
    first, last = spans[0][1], spans[-1][2]
    body = "".join(_block(source, *by_name[name]) for name in order)
    tail = source[last:]
    if not body:
        # "rows:" with nothing under it parses as null; an empty list is what the schema wants.
        head = source[:first].rstrip()
        if head.endswith("rows:"):
            return (head + " []\n" + tail).encode("utf-8")
    return (source[:first] + body + tail).encode("utf-8")


def set_row_keys(text: bytes, row: str, values: Mapping[str, str]) -> bytes:
    """``row``'s scalar keys set to ``values`` (each key must exist already; quoting kept)."""
    source, top = _compose(text)
    rows_node, _ = _rows(source, top)
    item = next((i for i in rows_node.value if _get(i, "name").value == row), None)
    if item is None:
        raise UsageError(f"no row {row!r} in the manifest")
    edits = []
    for key, value in values.items():
        node = _get(item, key)
        if node is None:
            raise UsageError(f"row {row} has no {key!r} key to change")
        quoted = node.style in ('"', "'")
        edits.append(
            (
                node.start_mark.index,
                node.end_mark.index,
                yaml_scalar(value, quoted=quoted),
            )
        )
    for start, end, new in sorted(edits, reverse=True):
        source = source[:start] + new + source[end:]
    return source.encode("utf-8")


def add_row_key(text: bytes, row: str, key: str, value: str) -> bytes:
    """``key: value`` added as ``row``'s last key (the row must not have it)."""
    source, top = _compose(text)
    rows_node, _ = _rows(source, top)
    item = next(i for i in rows_node.value if _get(i, "name").value == row)
    if _get(item, key) is not None:
        raise UsageError(f"row {row} has a {key!r} key already")
    column = item.value[0][0].start_mark.column
    end = _content_end(source, item)
    line = f"{' ' * column}{key}: {yaml_scalar(value)}\n"
    if not source[:end].endswith("\n"):
        line = "\n" + line
    return (source[:end] + line + source[end:]).encode("utf-8")


def renumbered(patches: Sequence[tuple[str, str | None]]) -> dict[str, str]:
    """New patch paths for rows (name, patch path in apply order) whose file is numbered
    (``0003-name.patch``): the numbered ones counted 1, 2, ... in their new order; only changes."""
    out: dict[str, str] = {}
    n = 0
    for name, path in patches:
        m = NUMBERED.match(path or "")
        if m is None:
            continue
        n += 1
        new = f"{m['dir']}{n:04d}-{m['rest']}"
        if new != path:
            out[name] = new
    return out


def append_retirement(text: bytes, fields: Mapping[str, str]) -> bytes:
    """A ``retirements:`` entry appended (the list made at the end of the file when there is none)."""
    source, top = _compose(text)
    keys = ("row", "pin", "upstream", "reason", "evidence")
    node = _get(top, "retirements")
    if node is not None and not node.flow_style and node.value:
        dash = node.value[0].start_mark.column - 2
        end = node.value[-1].value[-1][1].end_mark.index
        if end == 0 or source[end - 1] != "\n":
            nl = source.find("\n", end)
            end = len(source) if nl < 0 else nl + 1
        lines = [f"{' ' * dash}- {keys[0]}: {yaml_scalar(fields[keys[0]])}"]
        lines += [f"{' ' * (dash + 2)}{k}: {yaml_scalar(fields[k])}" for k in keys[1:]]
        block = "\n".join(lines) + "\n"
        if not source[:end].endswith("\n"):
            block = "\n" + block
        return (source[:end] + block + source[end:]).encode("utf-8")
    lines = [f"  - {keys[0]}: {yaml_scalar(fields[keys[0]])}"]
    lines += [f"    {k}: {yaml_scalar(fields[k])}" for k in keys[1:]]
    entry = "\n".join(lines) + "\n"
    if node is not None:  # "retirements: []" or "retirements:" (null): replaced by the block list
        key = next(k for k, _ in top.value if k.value == "retirements")
        start = _line_start(source, key.start_mark.index)
        nl = source.find("\n", node.end_mark.index if node.end_mark.index > start else start)
        end = len(source) if nl < 0 else nl + 1
        return (source[:start] + "retirements:\n" + entry + source[end:]).encode("utf-8")
    sep = "" if source.endswith("\n") else "\n"
    return (source + sep + "retirements:\n" + entry).encode("utf-8")

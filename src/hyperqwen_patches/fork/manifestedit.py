"""Targeted edits of the manifest's text, its comments and formatting kept: a row inserted after
another, rows' and export points' commits set, new rows appended (re-dumping the YAML would lose
comments, order and quoting)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.series.yamlwriting import yaml_scalar

if TYPE_CHECKING:
    from hyperqwen_patches.fork.exportplan import ExportPlan

# The keys of a row this tool writes into the manifest, in docs/manifest.md's order.
NEW_ROW_KEYS = (
    "name",
    "kind",
    "what",
    "patch",
    "cut_against",
    "retires_when",
    "export_point",
    "commit",
)


def insert_row(text: bytes, after: str, row: Mapping[str, str]) -> bytes:
    """The manifest's text with ``row`` written right after the row named ``after`` (block style, in
    the rows' own indentation); every other byte is kept."""
    import yaml

    source = text.decode("utf-8")
    top = yaml.compose(source, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    rows_node = next((v for k, v in top.value if k.value == "rows"), None)
    if rows_node is None or rows_node.flow_style:
        raise UsageError(
            "the manifest's rows are not a block list; add the row by hand (docs/manifest.md)"
        )
    for item in rows_node.value:
        name = next((v for k, v in item.value if k.value == "name"), None)
        if name is None or name.value != after or item.flow_style:
            continue
        dash_col = rows_node.start_mark.column
        key_col = item.start_mark.column
        keys = [k for k in NEW_ROW_KEYS if k in row]
        lines = [f"{' ' * dash_col}- {keys[0]}: {yaml_scalar(row[keys[0]])}"]
        lines += [f"{' ' * key_col}{k}: {yaml_scalar(row[k])}" for k in keys[1:]]
        end = item.value[-1][
            1
        ].end_mark.index  # the last value (the mapping's mark is the next item's)
        if end > 0 and source[end - 1] == "\n":  # a block scalar ends at the next line's start
            at, block = end, "\n".join(lines) + "\n"
        else:
            line_end = source.find("\n", end)
            at = len(source) if line_end < 0 else line_end
            block = "".join("\n" + line for line in lines)
        return (source[:at] + block + source[at:]).encode("utf-8")
    raise UsageError(f"no row {after!r} written in block style in the manifest")


def edit_manifest(text: bytes, plan: ExportPlan, new_rows: Sequence[Mapping[str, str]]) -> bytes:
    """Set rows' and export points' ``commit:`` (and points' ``base:``) and append new rows, editing only
    those scalars in the text (re-dumping the YAML would lose comments, order and quoting)."""
    import yaml

    source = text.decode("utf-8")
    # libyaml when present (as validation.py reads it): the pure-Python composer took a second for a
    # 1,000-row manifest; both give the same marks (character offsets) for a str.
    top = yaml.compose(source, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement) in character offsets

    inserts: dict[int, tuple[yaml.MappingNode, dict[str, str]]] = {}  # id(node) -> new keys

    def set_key(node: yaml.MappingNode, key: str, value: str) -> None:
        for k, v in node.value:
            if k.value == key:
                quoted = v.style in ('"', "'")
                text_value = json.dumps(value) if quoted else yaml_scalar(value)
                edits.append((v.start_mark.index, v.end_mark.index, text_value))
                return
        inserts.setdefault(id(node), (node, {}))[1][key] = value

    def flush_inserts() -> None:
        """New keys go after the mapping's last line, in docs/manifest.md's order."""
        order = ("export_point", "commit", "base")
        for node, keys in inserts.values():
            column = node.value[0][0].start_mark.column
            lines = [f"{' ' * column}{k}: {yaml_scalar(keys[k])}" for k in order if k in keys]
            end = node.value[-1][1].end_mark.index
            if end > 0 and source[end - 1] == "\n":  # a block scalar ends at the next line's start
                edits.append((end, end, "\n".join(lines) + "\n"))
            else:
                line_end = source.find("\n", end)
                line_end = len(source) if line_end < 0 else line_end
                edits.append((line_end, line_end, "".join("\n" + line for line in lines)))

    def get(node: yaml.MappingNode, key: str) -> yaml.Node | None:
        return next((v for k, v in node.value if k.value == key), None)

    rows_node = get(top, "rows")
    points_node = get(top, "export_points")
    if points_node is not None:
        for item in points_node.value:
            name = get(item, "name")
            if name is not None and name.value in plan.point_updates:
                base, tip = plan.point_updates[name.value]
                current_commit = get(item, "commit")
                current_base = get(item, "base")
                if current_commit is None or current_commit.value != tip:
                    set_key(item, "commit", tip)
                if current_base is None or current_base.value != base:
                    set_key(item, "base", base)
    if rows_node is not None:
        for item in rows_node.value:
            name = get(item, "name")
            if name is not None and name.value in plan.commit_updates:
                set_key(item, "commit", plan.commit_updates[name.value])
            if (
                name is not None
                and name.value in plan.point_of
                and get(item, "export_point") is None
            ):
                set_key(item, "export_point", plan.point_of[name.value])
    if new_rows and rows_node is not None:
        keys = NEW_ROW_KEYS
        if rows_node.flow_style or not rows_node.value:
            column = rows_node.start_mark.column if rows_node.value else 0
            dash = " " * 2
            lines = []
            for row in new_rows:
                lines.append(f"{dash}- {keys[0]}: {yaml_scalar(row[keys[0]])}")
                lines += [f"{dash}  {k}: {yaml_scalar(row[k])}" for k in keys[1:]]
            del column
            start = rows_node.start_mark.index
            while start > 0 and source[start - 1] == " ":  # "rows: []" becomes "rows:" + block
                start -= 1
            edits.append((start, rows_node.end_mark.index, "\n" + "\n".join(lines)))
        else:
            dash_col = rows_node.start_mark.column
            key_col = rows_node.value[0].start_mark.column
            lines = []
            for row in new_rows:
                lines.append(f"{' ' * dash_col}- {keys[0]}: {yaml_scalar(row[keys[0]])}")
                lines += [f"{' ' * key_col}{k}: {yaml_scalar(row[k])}" for k in keys[1:]]
            at = rows_node.end_mark.index
            prefix = "" if at == 0 or source[at - 1] == "\n" else "\n"
            edits.append((at, at, prefix + "\n".join(lines) + "\n"))
    flush_inserts()
    for start, end, replacement in sorted(edits, reverse=True):
        source = source[:start] + replacement + source[end:]
    return source.encode("utf-8")

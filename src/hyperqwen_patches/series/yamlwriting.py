"""YAML written into the manifest by the tool (export's new rows and commits, adopt, row commands)."""

from __future__ import annotations

import re


def yaml_scalar(value: str, *, quoted: bool = False) -> str:
    """A YAML scalar for ``value``: plain when unambiguous, double-quoted (JSON) otherwise, or always
    when ``quoted`` (a version: an unquoted 0.30 is a number; a value the file had quoted). Object
    names are always quoted, so every SHA in the manifest looks the same (one that is all digits
    would be a number). The one way the tool writes a manifest scalar (adopt, export, row commands)."""
    import json  # a writer's need: reading a manifest (every apply) does not pay its import

    if quoted:
        return json.dumps(value, ensure_ascii=False)
    if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", value):
        return json.dumps(value)
    if re.fullmatch(r"[a-z][a-z0-9._/-]*", value) and value not in (
        "null",
        "true",
        "false",
        "yes",
        "no",
        "on",
        "off",
    ):
        return value
    return json.dumps(value, ensure_ascii=False)

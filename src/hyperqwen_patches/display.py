"""Bytes shown to a person: patch content, paths and git output stay bytes everywhere else and become
text here only, for a message or a table. UTF-8, with undecodable bytes escaped (``\\xff``), never
dropped or replaced, so the text still says which bytes they were."""

from __future__ import annotations


def show(data: bytes | str) -> str:
    """Decode bytes for a person to read; undecodable bytes are escaped, never dropped."""
    if isinstance(data, str):
        return data
    return data.decode("utf-8", errors="backslashreplace")

"""Runtime-only knobs declared by a comment: what a row writes above the entries it puts on
``compile_factors``' ignore list.

Series kept by hand keep such knobs off the compile cache key on purpose and say why right above the
entries they add::

    ignored_factors = {
        "VLLM_SYN_KNOB_0",
        # Runtime-only dispatch evidence; does not alter generated code.
        "VLLM_DISPATCH_TRACE",
        "VLLM_DISPATCH_TRACE_PATH",
    }

That comment is the declaration: ``check`` accepts the knobs under it (showing the reason) and
``adopt`` copies them into the manifest's ``runtime_knobs``. Only the row's own lines count: the
entries and the comment must all be lines the row adds, so a comment someone else wrote (or a knob
with no comment at all) declares nothing. A comment at the end of the entry's own line is not a
declaration (it reads as a remark about that line, and proved too easy to write by accident).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from hyperqwen_patches.engine.patchmodel import ADDED, REMOVED, Patch

# One entry of a literal set/list/tuple of names: "VLLM_X", (a trailing remark allowed).
ENTRY_RE = re.compile(r"""^\s*(["'])(?P<name>[A-Z][A-Z0-9_]*)\1\s*,?\s*(#.*)?$""")
_COMMENT_RE = re.compile(r"^\s*#\s?(?P<text>.*?)\s*$")


def comment_above(lines: Sequence[tuple[str, bool]], index: int) -> str | None:
    """The reason declared for the entry at ``lines[index]``: the comment block right above the run
    of entries it belongs to, joined into one line. ``lines`` are ``(text, ours)`` with ``ours``
    true for the lines the row adds; every line walked over must be ours. None: no declaration."""
    if not lines[index][1] or ENTRY_RE.match(lines[index][0]) is None:
        return None
    i = index - 1
    while i >= 0 and lines[i][1] and ENTRY_RE.match(lines[i][0]):
        i -= 1
    comments: list[str] = []
    while i >= 0 and lines[i][1]:
        m = _COMMENT_RE.match(lines[i][0])
        if m is None or not lines[i][0].lstrip().startswith("#"):
            break
        comments.insert(0, m["text"])
        i -= 1
    reason = " ".join(c for c in comments if c)
    return reason or None


def declared_in_patch(patch: Patch, envs_paths: Sequence[bytes]) -> Iterator[tuple[str, str, int]]:
    """``(knob, reason, patch line)`` for every entry a patch adds to ``envs.py`` under a comment it
    also adds (the post-image of each hunk, read as the file will hold it)."""
    for fp in patch.files:
        if fp.new_path not in envs_paths:
            continue
        for hunk in fp.hunks:
            post = [
                (text.decode("utf-8", errors="replace").rstrip("\r\n"), kind == ADDED, n)
                for n, (kind, text) in enumerate(hunk.lines, 1)
                if kind != REMOVED
            ]
            pairs = [(t, ours) for t, ours, _ in post]
            for i, (text, ours, n) in enumerate(post):
                m = ENTRY_RE.match(text)
                if m is None or not ours:
                    continue
                reason = comment_above(pairs, i)
                if reason is not None:
                    yield m["name"], reason, hunk.patch_line + n

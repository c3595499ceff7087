"""The old import path of the patch model and scanner, kept only for the modules another branch is
reshaping now (``commands/apply.py``, ``fork/replay.py``, ``port/*.py``): once that branch has landed,
their imports name ``patchmodel`` and ``patchscan`` and this module goes. Nothing else imports it."""

from __future__ import annotations

from hyperqwen_patches.engine.patchmodel import ADDED, FilePatch, Hunk, Patch, split_lines
from hyperqwen_patches.engine.patchscan import CRLF_NOTE, parse_patch

__all__ = ["ADDED", "CRLF_NOTE", "FilePatch", "Hunk", "Patch", "parse_patch", "split_lines"]

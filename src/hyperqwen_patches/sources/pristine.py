"""The pristine tree: the unmodified release, from PyPI (cached), a git checkout, or a directory.

Sources (``parse_source``):

- ``pypi:vllm==0.29.0`` — the wheel, fetched with ``pip download --no-deps --only-binary=:all:`` into the
  cache and read straight from the zip: the entry's member table (``wheelmembers.py``) keeps each text
  member's offset, so a read is one lookup, two ``pread`` calls and an inflate (under 1 ms) and no run
  parses the central directory again (~30 ms for the 316 MB wheel's ~4,900 members, 0.13 s for 30,000:
  a cost that grew with the tree; measured here 2026-11-30). Nothing is extracted.
  ``pypi:vllm==0.29.0#sdist``
  takes the source distribution instead (extracted once into the cache: a tar.gz has no random access).
  ``pypi`` alone means ``pypi:<package>==<version>`` of the caller.
- ``git:PATH@REF`` — the ``vllm/`` subtree of a checkout at REF (a tag, branch or commit).
- ``dir:PATH`` — any directory holding ``vllm/`` (an installed ``site-packages``, an unpacked sdist).

The tree is the package's *text* files, paths relative to the directory that holds the package
(``b"vllm/envs.py"``). Binaries (``.so`` files, images, the ``vllm-rs`` executable: anything with a NUL
byte in its first 8,000 bytes, git's own rule) are left out and listed by ``binaries()``.

This module picks the source; each kind has its own: the protocol ``pristinetree.py``, ``dirtree.py``,
``gittree.py``, ``wheeltree.py`` (a member read by ``zipmember.py``), the cache ``pypicache.py`` and
the index's downloads ``download.py``.
"""

from __future__ import annotations

from pathlib import Path

from hyperqwen_patches.cachedir import cache_dir
from hyperqwen_patches.sources.dirtree import DirTree
from hyperqwen_patches.sources.gittree import GitTree
from hyperqwen_patches.sources.pristinetree import PristineTree, Progress, Quiet
from hyperqwen_patches.sources.pypicache import PypiCache
from hyperqwen_patches.sources.spec import parse_source


def open_pristine(
    source: str,
    *,
    package: str = "vllm",
    version: str,
    cache: Path | None = None,
    progress: Progress | None = None,
) -> PristineTree:
    """Open the pristine tree named by ``source`` (fetching it into the cache if needed)."""
    spec = parse_source(source)
    if spec.kind == "dir":
        assert spec.path is not None
        return DirTree(Path(spec.path), package=package)
    if spec.kind == "git":
        assert spec.path is not None and spec.ref is not None
        return GitTree(Path(spec.path), spec.ref, package=package)
    pkg = spec.package or package
    ver = spec.version or version
    store = PypiCache(cache or cache_dir(), progress or Quiet())
    if spec.sdist:
        return store.sdist_tree(pkg, ver)
    return store.wheel_tree(pkg, ver)

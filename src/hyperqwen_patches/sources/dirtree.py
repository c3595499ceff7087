"""A pristine tree from a directory on disk: ``dir:PATH`` (an installed ``site-packages``, an unpacked
sdist) and the cached sdist of ``pypi:...#sdist``."""

from __future__ import annotations

import os
from pathlib import Path

from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.sources.pristinetree import SNIFF_BYTES, PristineTree, is_binary


class DirTree(PristineTree):
    """A directory holding ``<package>/`` on disk; text-ness is sniffed per file."""

    def __init__(self, base: Path, *, package: str) -> None:
        if not (base / package).is_dir():
            hint = None
            if base.name == package and (base / "__init__.py").is_file():
                hint = f"give the directory that holds {package}/: dir:{base.parent}"
            raise UsageError(f"source dir:{base}: no {package}/ directory in it", hint=hint)
        self.base = base
        self.package = package
        self.label = f"dir:{base}"
        self._listing: tuple[list[bytes], list[bytes]] | None = None

    def _file(self, path: bytes) -> Path | None:
        if not path.startswith(self.package.encode() + b"/") or b"/../" in b"/" + path + b"/":
            return None
        return self.base / os.fsdecode(path)

    def read(self, path: bytes) -> bytes | None:
        file = self._file(path)
        if file is None or not file.is_file():
            return None
        data = file.read_bytes()
        return None if is_binary(data) else data

    def _list(self) -> tuple[list[bytes], list[bytes]]:
        if self._listing is None:
            text: list[bytes] = []
            binary: list[bytes] = []
            top = os.fsencode(self.base)
            for dirpath, dirnames, filenames in os.walk(os.path.join(top, self.package.encode())):
                dirnames[:] = [d for d in dirnames if d != b"__pycache__"]
                for name in filenames:
                    full = os.path.join(dirpath, name)
                    rel = os.path.relpath(full, top)
                    with open(full, "rb") as fh:
                        (binary if is_binary(fh.read(SNIFF_BYTES)) else text).append(rel)
            self._listing = (sorted(text), sorted(binary))
        return self._listing

    def paths(self) -> list[bytes]:
        return list(self._list()[0])

    def binaries(self) -> list[bytes]:
        return list(self._list()[1])

"""A pristine source string (``pypi:vllm==0.29.0``, ``pypi:vllm==0.29.0#sdist``, ``git:PATH@REF``,
``dir:PATH``) as data. Pure and light: the manifest validates its ``source`` with it without importing
the release reader (pristine.py, docs/manifest.md)."""

from __future__ import annotations

import re
from pathlib import Path

from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.records import record


class SourceSpecError(UsageError):
    """A pristine source string that does not parse."""


@record(frozen=True)
class SourceSpec:
    kind: str  # "pypi" | "git" | "dir"
    package: str | None = None
    version: str | None = None
    sdist: bool = False
    path: str | None = None
    ref: str | None = None


_PYPI_RE = re.compile(r"^(?P<package>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!-]+)$")
SOURCE_FORMS = "pypi:vllm==0.29.0, pypi:vllm==0.29.0#sdist, git:PATH@REF, dir:PATH"


def parse_source(text: str) -> SourceSpec:
    """Parse a source string (see the module docstring); raise :class:`SourceSpecError`."""
    scheme, sep, rest = text.partition(":")
    if text == "pypi" or text.startswith(("pypi:", "pypi#")):
        body, _, option = text[len("pypi") :].removeprefix(":").partition("#")
        if option not in ("", "sdist"):
            raise SourceSpecError(
                f"source {text!r}: unknown option #{option} (the only one is #sdist)"
            )
        if not body:
            return SourceSpec("pypi", sdist=option == "sdist")
        m = _PYPI_RE.match(body)
        if m is None:
            raise SourceSpecError(
                f"source {text!r}: expected pypi:PACKAGE==VERSION, such as pypi:vllm==0.29.0"
            )
        return SourceSpec(
            "pypi", package=m["package"], version=m["version"], sdist=option == "sdist"
        )
    if scheme == "git" and sep:
        path, at, ref = rest.rpartition("@")
        if not at or not path or not ref:
            raise SourceSpecError(
                f"source {text!r}: expected git:PATH@REF, such as git:../vllm@v0.29.0"
            )
        return SourceSpec("git", path=path, ref=ref)
    if scheme == "dir" and sep and rest:
        return SourceSpec("dir", path=rest)
    raise SourceSpecError(f"source {text!r} is not understood; the forms are {SOURCE_FORMS}")


def absolute_source(text: str, cwd: Path) -> str:
    """``text`` with a ``dir:``/``git:`` path made absolute against ``cwd``: what a saved state keeps,
    so a later run from another directory reads the same tree (never a decoy at the relative path)."""
    spec = parse_source(text)
    if spec.kind == "pypi" or spec.path is None or "://" in spec.path:
        return text
    path = (cwd / Path(spec.path).expanduser()).resolve()
    return f"dir:{path}" if spec.kind == "dir" else f"git:{path}@{spec.ref}"

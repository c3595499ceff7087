"""``docker/requirements.txt``: the lines that name the package, read as pip reads them (enough of it)."""

from __future__ import annotations

import re

REQUIREMENTS = "docker/requirements.txt"

_REQ_LINE = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(?P<spec>[<>=!~].*)?$"
)


def normalize(name: str) -> str:
    """PEP 503 name normalisation: ``Foo_Bar.baz`` and ``foo-bar-baz`` are one project."""
    return re.sub(r"[-_.]+", "-", name).lower()


def package_pins(text: str, package: str) -> list[tuple[int, str]]:
    """(line, specifier without spaces) of every requirement naming ``package`` (comments, blank lines
    and options such as ``-r`` skipped); the specifier is ``""`` for an unpinned requirement."""
    pins: list[tuple[int, str]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        match = _REQ_LINE.match(line)
        if match is None or normalize(match["name"]) != normalize(package):
            continue
        pins.append((number, (match["spec"] or "").replace(" ", "")))
    return pins

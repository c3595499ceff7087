"""docker/requirements.txt: the pin equals the manifest's, every co-pin is one vLLM 0.29.0 allows.

A co-pin outside vLLM's own ``Requires-Dist`` would make pip either refuse the image's install or,
worse, silently resolve a stack vLLM was never released against. The requirements are read from the
real wheel's ``METADATA`` (the wheel ``check`` already keeps in the cache), and evaluated for the
image's platform: Linux x86_64, CPython 3.12.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from hyperqwen_patches.series.manifest import load_manifest

REPO = Path(__file__).resolve().parent.parent
REQUIREMENTS = REPO / "docker" / "requirements.txt"

# The image: nvidia/cuda on Ubuntu 24.04, whose Python is 3.12 (docker/Dockerfile).
IMAGE_ENV = {
    **default_environment(),
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}


@dataclass(frozen=True)
class Line:
    number: int
    requirement: Requirement


def parse_requirements(text: str, *, name: str) -> tuple[list[Line], list[str]]:
    """Requirement lines (comments and blanks skipped) and the problems, each naming file:line."""
    lines: list[Line] = []
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        body = raw.split("#", 1)[0].strip()
        if not body:
            continue
        if body.startswith("-"):
            problems.append(f"{name}:{number}: pip option {body!r}: the image takes pins only")
            continue
        try:
            lines.append(Line(number, Requirement(body)))
        except InvalidRequirement as exc:
            problems.append(f"{name}:{number}: {body!r} is not a requirement: {exc}")
    return lines, problems


def copin_problems(
    text: str, requires_dist: list[str], *, pin: str, name: str = "docker/requirements.txt"
) -> list[str]:
    """Everything wrong with a requirements file against vLLM ``pin``'s ``Requires-Dist``."""
    lines, problems = parse_requirements(text, name=name)
    allowed: dict[str, list[Requirement]] = {}
    for spec in requires_dist:
        req = Requirement(spec)
        if req.marker is None or req.marker.evaluate(IMAGE_ENV):
            allowed.setdefault(canonicalize_name(req.name), []).append(req)
    seen: dict[str, int] = {}
    vllm_lines = [line for line in lines if canonicalize_name(line.requirement.name) == "vllm"]
    if len(vllm_lines) != 1:
        problems.append(f"{name}: want exactly one vllm=={pin} line, found {len(vllm_lines)}")
    for line in lines:
        req = line.requirement
        key = canonicalize_name(req.name)
        where = f"{name}:{line.number}: {req}"
        if key in seen:
            problems.append(f"{where}: {req.name} is already required on line {seen[key]}")
            continue
        seen[key] = line.number
        pins = [s for s in req.specifier if s.operator == "==" and "*" not in s.version]
        if len(pins) != 1 or len(req.specifier) != 1 or req.marker is not None or req.extras:
            problems.append(f"{where}: write an exact pin, NAME==VERSION, nothing else")
            continue
        version = pins[0].version
        if key == "vllm":
            if version != pin:
                problems.append(f"{where}: the manifest pins vllm {pin}")
            continue
        if key not in allowed:
            problems.append(
                f"{where}: vllm {pin} does not require {req.name} on the image's platform; "
                "co-pin only vLLM's own requirements"
            )
            continue
        for wanted in allowed[key]:
            if not wanted.specifier.contains(version, prereleases=True):
                problems.append(f"{where}: vllm {pin} requires {wanted}")
    return problems


@pytest.fixture(scope="module")
def vllm_requires_dist() -> list[str]:
    """``Requires-Dist`` of the vLLM wheel at the manifest's pin, from the cached wheel."""
    from hyperqwen_patches.sources.pristine import open_pristine
    from hyperqwen_patches.sources.wheeltree import WheelTree

    pin = load_manifest(REPO).pin
    tree = open_pristine(f"pypi:vllm=={pin}", version=pin)
    try:
        assert isinstance(tree, WheelTree), type(tree)
        with zipfile.ZipFile(tree.entry / tree.index["file"]) as wheel:
            metadata = wheel.read(f"vllm-{pin}.dist-info/METADATA").decode("utf-8")
    finally:
        tree.close()
    header = metadata.split("\n\n", 1)[0]
    specs = [
        line.removeprefix("Requires-Dist:").strip()
        for line in header.splitlines()
        if line.startswith("Requires-Dist:")
    ]
    assert len(specs) > 50, "METADATA without vLLM's requirements?"
    return specs


@pytest.mark.network
def test_the_shipped_requirements_agree_with_the_vllm_wheel(vllm_requires_dist: list[str]) -> None:
    pin = load_manifest(REPO).pin
    problems = copin_problems(REQUIREMENTS.read_text(), vllm_requires_dist, pin=pin)
    assert problems == []


def test_the_pin_line_is_the_manifest_pin_and_is_the_first_requirement() -> None:
    lines, problems = parse_requirements(REQUIREMENTS.read_text(), name="docker/requirements.txt")
    assert problems == []
    assert str(lines[0].requirement) == f"vllm=={load_manifest(REPO).pin}"


# Bad input: each of these must be refused, naming the line (the checker itself can fail).
REQUIRES = [
    "torch==2.13.0",
    "transformers>=5.10.4",
    "six>=1.16.0; python_version > '3.11'",
    "zentorch==2.13.0.0; extra == 'zen'",
    "tokenspeed-mla==0.1.8; platform_system == 'Darwin'",
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("vllm==0.29.0\ntorch==2.12.0\n", ":2: torch==2.12.0: vllm 0.29.0 requires torch==2.13.0"),
        ("vllm==0.28.0\n", ":1: vllm==0.28.0: the manifest pins vllm 0.29.0"),
        ("torch==2.13.0\n", "want exactly one vllm==0.29.0 line, found 0"),
        ("vllm==0.29.0\ntransformers>=5.10.4\n", ":2: transformers>=5.10.4: write an exact pin"),
        ("vllm==0.29.0\ntransformers==5.9.0\n", "requires transformers>=5.10.4"),
        ("vllm==0.29.0\nnumpy==2.0.0\n", "does not require numpy"),
        ("vllm==0.29.0\nzentorch==2.13.0.0\n", "does not require zentorch"),
        ("vllm==0.29.0\ntokenspeed-mla==0.1.8\n", "does not require tokenspeed-mla"),
        ("vllm==0.29.0\ntorch==2.13.0\nTorch==2.13.0\n", ":3: Torch==2.13.0: Torch is already"),
        ("vllm==0.29.0\n--extra-index-url x\n", ":2: pip option"),
        ("vllm==0.29.0\ntorch = 2\n", ":2: 'torch = 2' is not a requirement"),
    ],
)
def test_bad_requirements_are_named_by_line(text: str, expected: str) -> None:
    problems = copin_problems(text, REQUIRES, pin="0.29.0")
    assert any(expected in p for p in problems), problems


def test_good_requirements_pass_the_checker() -> None:
    text = (
        "vllm==0.29.0  # the pin\n\n# co-pins\ntorch==2.13.0\nsix==1.17.0\ntransformers==5.24.0\n"
    )
    assert copin_problems(text, REQUIRES, pin="0.29.0") == []

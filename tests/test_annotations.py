"""GitHub workflow annotations from ``check``: in GitHub Actions (or with HQP_ANNOTATIONS=github)
each failing check is an ``::error`` line on stderr, on the repository file it concerns."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from test_rowedit import hqp, project  # noqa: F401  (the fixture)


def annotated(series: Path, fork: Path, **env: str) -> list[str]:
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        proc = hqp("check", "--fork", fork, cwd=series)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert proc.returncode == 1
    return [line for line in proc.stderr.splitlines() if line.startswith("::")]


def test_findings_become_annotations_on_their_files(project: tuple[Path, Path]) -> None:  # noqa: F811
    series, fork = project
    (series / "patches/manifest.yaml").write_text(
        (series / "patches/manifest.yaml").read_text() + "\n"
    )
    lines = annotated(series, fork, GITHUB_ACTIONS="true", HQP_ANNOTATIONS="")
    assert lines, "no annotation printed"
    assert all(line.startswith(("::error ", "::warning ")) for line in lines)
    whitespace = [line for line in lines if "check [whitespace]" in line]
    assert whitespace and whitespace[0].startswith("::error file=patches/crlf-latin1.patch,")
    # docker/requirements.txt is absent: a note since #38 (a series repository may have none), and
    # notes are not annotated.
    assert not [line for line in lines if "check [pin]" in line]
    for line in lines:  # one line each: newlines in details are %0A
        assert "\n" not in line
    assert annotated(series, fork, GITHUB_ACTIONS="", HQP_ANNOTATIONS="") == []
    assert annotated(series, fork, GITHUB_ACTIONS="", HQP_ANNOTATIONS="github") != []


def test_a_hunk_that_fails_is_annotated_on_its_line_of_the_patch(
    project: tuple[Path, Path],  # noqa: F811
) -> None:
    series, fork = project
    # The release line the envs-knob hunk's context needs, changed: the hunk fails.
    pristine = Path(
        next(
            line.split("dir:", 1)[1].strip()
            for line in (series / "patches/manifest.yaml").read_text().splitlines()
            if line.startswith("source: dir:")
        )
    )
    envs = pristine / "vllm/envs.py"
    envs.write_bytes(envs.read_bytes().replace(b"VLLM_KNOB_19 =", b"VLLM_KNOB_19b ="))
    lines = annotated(series, fork, HQP_ANNOTATIONS="github")
    (apply,) = [line for line in lines if "check [apply]" in line]
    patch = (series / "patches/envs-knob.patch").read_text().splitlines()
    (hunk_line,) = [i for i, text in enumerate(patch, 1) if text.startswith("@@")]
    assert apply.startswith(f"::error file=patches/envs-knob.patch,line={hunk_line},title="), apply


def test_manifest_problems_are_annotated_on_their_lines(
    project: tuple[Path, Path],  # noqa: F811
) -> None:
    series, _ = project
    manifest = series / "patches/manifest.yaml"
    text = manifest.read_text().splitlines()
    kinds = [i for i, line in enumerate(text, 1) if line.strip().startswith("kind:")]
    for i in kinds[:2]:
        text[i - 1] = text[i - 1].replace("kind:", "kind: nonsense #")
    manifest.write_text("\n".join(text) + "\n")
    proc = subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", "check"], cwd=series,
        env={**os.environ, "HQP_ANNOTATIONS": "github"}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.startswith("::")]
    assert [line.split(",title=")[0] for line in lines] == [
        f"::error file=patches/manifest.yaml,line={i}" for i in kinds[:2]
    ], proc.stderr
    assert all("unknown kind 'nonsense'" in line for line in lines)

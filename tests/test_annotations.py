"""GitHub workflow annotations from ``check``: in GitHub Actions (or with HQP_ANNOTATIONS=github)
each failing check is an ``::error`` line on stderr, on the repository file it concerns."""

from __future__ import annotations

import os
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
    pin = [line for line in lines if "check [pin]" in line]
    assert pin and "file=" not in pin[0]  # docker/requirements.txt is absent: the run is annotated
    for line in lines:  # one line each: newlines in details are %0A
        assert "\n" not in line
    assert annotated(series, fork, GITHUB_ACTIONS="", HQP_ANNOTATIONS="") == []
    assert annotated(series, fork, GITHUB_ACTIONS="", HQP_ANNOTATIONS="github") != []

"""Row names are `\\A[a-z0-9][a-z0-9._-]{0,99}\\Z` everywhere: `new` refuses a name with a final
newline or past 100 characters before it writes anything, and the manifest refuses a long one (its
strings are stripped, so a final newline there is no name's)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from test_rowedit import hqp, project  # noqa: F401  (the fixture)

from hyperqwen_patches.series.manifestmodel import NAME_RE


@pytest.mark.parametrize(
    "name", ["abc\n", "a" * 101, "Abc", "-abc", "a b", "abc/def", "", "abc\nrow"]
)
def test_a_bad_name_is_refused(name: str) -> None:
    assert not NAME_RE.match(name)


@pytest.mark.parametrize("name", ["a", "a" * 100, "kvarn-v2.runner_1", "0day"])
def test_a_good_name_is_taken(name: str) -> None:
    assert NAME_RE.match(name)


def state(series: Path, fork: Path) -> tuple[bytes, bytes]:
    refs = subprocess.run(["git", "for-each-ref"], cwd=fork, capture_output=True, check=True).stdout
    return (series / "patches/manifest.yaml").read_bytes(), refs


@pytest.mark.parametrize("name", ["abc\n", "x" * 101])
def test_new_refuses_the_name_before_writing_anything(
    project: tuple[Path, Path],  # noqa: F811
    name: str,
) -> None:
    series, fork = project
    before = state(series, fork)
    proc = hqp("new", name, "--after", "envs-knob", "--fork", fork, cwd=series)
    assert proc.returncode == 2, proc.stderr
    assert "row name" in proc.stderr
    assert state(series, fork) == before
    assert not (series / ".hqp/edit").exists() or not any((series / ".hqp/edit").iterdir())


def test_the_manifest_refuses_a_name_past_100_characters(
    project: tuple[Path, Path],  # noqa: F811
) -> None:
    series, _ = project
    manifest = series / "patches/manifest.yaml"
    text = manifest.read_text()
    manifest.write_text(text.replace("name: envs-knob", "name: " + "x" * 101, 1))
    proc = hqp("list", cwd=series)
    assert proc.returncode == 2
    assert "is not a row name" in proc.stderr

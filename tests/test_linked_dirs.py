"""``patches/`` and ``.hqp/`` that are links out of the repository are refused by every command
that reads or writes there (adopt, list/render/check through the manifest, edit's work dir), with
nothing written outside; a link that stays inside the repository is fine."""

from __future__ import annotations

import shutil
from pathlib import Path

from test_rowedit import hqp, project  # noqa: F401  (the fixture)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_patches_linked_outside_is_refused(
    project: tuple[Path, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    series, _ = project
    outside = tmp_path / "outside-patches"
    shutil.move(series / "patches", outside)
    (series / "patches").symlink_to(outside)
    before = snapshot(outside)
    for args in (("list",), ("render",), ("check",)):
        proc = hqp(*args, cwd=series)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert "outside the repository" in proc.stderr, args
    assert snapshot(outside) == before
    # a link inside the repository is the repository's own business
    (series / "patches").unlink()
    shutil.move(outside, series / "kept-patches")
    (series / "patches").symlink_to("kept-patches")
    assert hqp("list", cwd=series).returncode == 0


def test_hqp_work_dir_linked_outside_is_refused(
    project: tuple[Path, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    series, _ = project
    outside = tmp_path / "outside-work"
    outside.mkdir()
    (series / ".hqp").symlink_to(outside)
    proc = hqp("edit", "envs-knob", cwd=series)
    assert proc.returncode == 2, proc.stderr
    assert "outside the repository" in proc.stderr
    assert list(outside.iterdir()) == []

"""The shipped series on the real vLLM 0.29.0 wheel: the engine against GNU patch, file for file.

The hypothesis suite (``test_differential_gnu.py``) covers the placement rules on generated input; this
test covers the real thing the Docker image does: every patch row of ``patches/series`` applied with
``patch -p1 --fuzz 0 --forward`` in order, the module files copied, and the engine's result (the same
manifest through ``series.default_series``) byte-identical to it; then ``verify_applied`` finds every
row in GNU's tree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO_ROOT, require_gnu_patch

from hyperqwen_patches.engine import Policy, apply_series, verify_applied


@pytest.mark.network
def test_shipped_series_on_the_real_wheel_matches_gnu_patch(tmp_path: Path) -> None:
    from hyperqwen_patches.series.rows import default_series
    from hyperqwen_patches.sources.pristine import open_pristine

    patches = default_series(REPO_ROOT)
    with open_pristine("pypi:vllm==0.29.0", version="0.29.0") as pristine:
        read: dict[bytes, bytes | None] = {}

        def reader(path: bytes) -> bytes | None:
            read[path] = pristine.read(path)
            return read[path]

        result = apply_series(patches, reader, Policy(ambiguity="error"))
    assert result.ok, [(p.name, p.status, p.error) for p in result.patches]
    assert result.hunk_totals["failed"] == result.hunk_totals["ambiguous"] == 0

    # GNU patch gets a tree holding the files the series touches (it reads no others).
    root = tmp_path / "site-packages"
    for path, content in read.items():
        if content is not None:
            target = root / os.fsdecode(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
    series = (REPO_ROOT / "patches/series").read_text().splitlines()
    for entry in series:
        if entry.startswith("#") or not entry.strip():
            continue
        proc = subprocess.run(
            [
                require_gnu_patch(),
                "-p1",
                "--fuzz",
                "0",
                "--forward",
                "-i",
                str(REPO_ROOT / "patches" / entry),
            ],
            cwd=root,
            capture_output=True,
            check=False,
            env={**os.environ, "LC_ALL": "C"},
        )
        assert proc.returncode == 0, (entry, proc.stdout, proc.stderr)
    modules = REPO_ROOT / "kvarn" / "files"
    if modules.is_dir():
        shutil.copytree(modules, root, dirs_exist_ok=True)

    gnu = {os.fsencode(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    for path, content in result.changes.items():
        assert gnu.get(path) == content, path
    presence = verify_applied(patches, gnu.get)
    assert [r.status for r in presence] == ["present"] * len(patches)

"""Property: for generated forks (random edits of files with CRLF, Latin-1 bytes and missing final
newlines), export then import reproduces every commit's tree, and exporting the import again gives the
same bytes. Real git repositories throughout; few examples because each builds three repositories."""

from __future__ import annotations

import itertools
from pathlib import Path

from fixtures_git import PRISTINE, DictTree, FixtureCommit, make_fork, sh
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_import_roundtrip import export, new_series

from hyperqwen_patches.fork import exporting, importing
from hyperqwen_patches.series.manifest import load_manifest

LINES = st.sampled_from(
    [b"alpha\n", b"beta\r\n", "caf\xe9\n".encode("latin-1"), b"    return x\n", b"\n", b"# note\n"]
)
FILES = (b"vllm/envs.py", b"vllm/crlf.py", b"vllm/latin1.txt", b"vllm/nonl.py")


@st.composite
def edits(draw: st.DrawFn, files: dict[bytes, bytes]) -> dict[bytes, bytes]:
    """One commit: for one or two files, replace, insert or delete a few lines (maybe drop the final
    newline)."""
    out: dict[bytes, bytes] = {}
    for path in draw(st.lists(st.sampled_from(FILES), min_size=1, max_size=2, unique=True)):
        lines = files[path].splitlines(keepends=True) or [b""]
        for _ in range(draw(st.integers(1, 3))):
            i = draw(st.integers(0, len(lines)))
            action = draw(st.sampled_from(["insert", "replace", "delete"]))
            if action == "insert" or not lines:
                lines.insert(i, draw(LINES))
            elif action == "replace":
                lines[min(i, len(lines) - 1)] = draw(LINES)
            elif len(lines) > 1:
                del lines[min(i, len(lines) - 1)]
        data = b"".join(lines)
        if draw(st.booleans()) and data.endswith(b"\n"):
            data = data.rstrip(b"\r\n")
        if data != files[path]:
            out[path] = data
    return out


@st.composite
def forks(draw: st.DrawFn) -> list[dict[bytes, bytes]]:
    state = dict(PRISTINE)
    commits = []
    for _ in range(draw(st.integers(1, 3))):
        change = draw(edits(state))
        if change:
            state.update(change)
            commits.append(change)
    return commits


counter = itertools.count()


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(commits=forks())
def test_export_import_export(tmp_path: Path, commits: list[dict[bytes, bytes]]) -> None:
    if not commits:
        return
    work = tmp_path / f"case{next(counter)}"
    fixture = tuple(
        FixtureCommit(f"row-{i}", f"Generated change {i}", change)
        for i, change in enumerate(commits)
    )
    fork = work / "fork"
    _base, shas = make_fork(fork, fixture)
    series = new_series(work / "series")
    export(series, fork)
    files = {p.name: p.read_bytes() for p in (series / "patches").glob("*.patch")}
    result = importing.import_series(
        load_manifest(series), work / "rebuilt", tree=DictTree(PRISTINE), create=True
    )
    rebuilt = [r.commit for r in result[0].rows]
    assert [sh(["rev-parse", f"{c}^{{tree}}"], cwd=work / "rebuilt") for c in rebuilt] == [
        sh(["rev-parse", f"{c}^{{tree}}"], cwd=fork) for c in shas
    ]
    again = exporting.plan_export(load_manifest(series), work / "rebuilt")
    assert not again.semantic and not again.positional and not again.added_rows
    assert {p.name: p.read_bytes() for p in (series / "patches").glob("*.patch")} == files

"""Export bytes are the same under any git configuration (issue 4's measured leaks), and refusals."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fixtures_git import (
    BRANCH,
    FORK_COMMITS,
    FixtureCommit,
    apply_commit,
    commit_env,
    make_fork,
    make_hostile,
    sh,
)

from hyperqwen_patches import gitrun
from hyperqwen_patches.errors import FindingError
from hyperqwen_patches.fork import exporting, formatpatch, refusals
from hyperqwen_patches.fork import reading as forkgit


def _export(repo: Path, base: str) -> dict[str, bytes | dict[bytes, bytes]]:
    git_dir = gitrun.git_dir_of(repo)
    tip = forkgit.require(git_dir, BRANCH, what="t")
    return exporting.export_commits(git_dir, forkgit.list_commits(git_dir, base, tip))


def test_hostile_global_and_repository_config_give_identical_bytes(
    tmp_path: Path, isolated_env: Path
) -> None:
    repo = tmp_path / "fork"
    base, shas = make_fork(repo)
    clean = _export(repo, base)
    # The same commits exported by plain git under this hostile config do change: the leaks are real.
    plain_before = sh(["format-patch", "--stdout", "-1", shas[2]], cwd=repo)
    make_hostile(repo, isolated_env)
    plain_after = subprocess_format_patch(repo, shas[2])
    assert plain_before != plain_after
    hostile = _export(repo, base)
    assert hostile == clean
    assert list(clean) == shas


def subprocess_format_patch(repo: Path, sha: str) -> bytes:
    import subprocess

    proc = subprocess.run(
        ["git", "format-patch", "--stdout", "-1", sha], cwd=repo, capture_output=True, check=False
    )
    return proc.stdout + proc.stderr


def test_golden_shape_of_an_exported_file(tmp_path: Path) -> None:
    repo = tmp_path / "fork"
    base, shas = make_fork(repo)
    out = _export(repo, base)
    text = out[shas[2]]
    assert isinstance(text, bytes)
    lines = text.split(b"\n")
    assert lines[0] == b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001"
    assert lines[1] == b"From: Fork Author <fork@example.invalid>"
    assert lines[3] == b"Subject: [PATCH] Make run.sh executable and rename old_name.py"
    for sha in shas:  # no commit SHA anywhere in any file
        assert all(sha.encode() not in f for f in out.values() if isinstance(f, bytes))
    assert b"rename from vllm/old_name.py\nrename to vllm/new_name.py\n" in text
    assert b"old mode 100644\nnew mode 100755\n" in text
    assert b"\n-- \n" not in text  # no signature naming the git version
    crlf = out[shas[1]]
    assert isinstance(crlf, bytes)
    assert b"-    return 1\r\n+    return 10\r\n" in crlf
    assert "na\xefve \xe0 la carte".encode("latin-1") in crlf
    assert b"+y = 20\n z = 3\n\\ No newline at end of file\n" in crlf


def _extra_commit(repo: Path, fc: FixtureCommit) -> str:
    return apply_commit(repo, 10, fc)


def test_refusals_are_collected_and_named(tmp_path: Path) -> None:
    repo = tmp_path / "fork"
    base, _ = make_fork(repo)
    outside = _extra_commit(
        repo, FixtureCommit("outside", "Touch setup.py", {b"setup.py": b"print()\n"})
    )
    binary = _extra_commit(
        repo, FixtureCommit("binary", "Add a blob", {b"vllm/blob.bin": b"\0\1\2\3" * 10})
    )
    diffish = _extra_commit(
        repo,
        FixtureCommit(
            "diffish",
            "Explain a diff",
            {b"vllm/nonl.py": b"x = 2\n"},
            body="Before:\n--- a/vllm/nonl.py\n+++ b/vllm/nonl.py",
        ),
    )
    with pytest.raises(FindingError) as info:
        _export(repo, base)
    message = info.value.message
    assert "4 problem(s)" in message
    assert f"{outside[:12]} 'Touch setup.py': touches setup.py, outside vllm/" in message
    assert f"{binary[:12]} 'Add a blob': vllm/blob.bin: a binary change" in message
    assert f"{diffish[:12]} 'Explain a diff': message line 4 '--- a/vllm/nonl.py'" in message
    assert "message line 5 '+++ b/vllm/nonl.py'" in message


def test_merge_commit_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "fork"
    base, shas = make_fork(repo)
    sh(["branch", "side", shas[0]], cwd=repo)
    sh(["checkout", "-q", "side"], cwd=repo)
    _extra_commit(repo, FixtureCommit("side", "Side work", {b"vllm/side.py": b"s = 1\n"}))
    sh(["checkout", "-q", BRANCH], cwd=repo)
    sh(["merge", "-q", "--no-ff", "-m", "Merge side", "side"], cwd=repo, env=commit_env(20))
    with pytest.raises(FindingError, match=r"'Merge side': a merge commit \(2 parents\)"):
        _export(repo, base)


def test_module_row_commit_exports_files(tmp_path: Path) -> None:
    repo = tmp_path / "fork"
    base, shas = make_fork(repo)
    git_dir = gitrun.git_dir_of(repo)
    commits = forkgit.list_commits(git_dir, base, shas[-1])
    out = exporting.export_commits(git_dir, commits, module_rows=frozenset({"new-module"}))
    assert out[shas[-1]] == {b"vllm/hqp/module.py": b"VALUE = 1\n"}
    with pytest.raises(FindingError, match="a module-file row's commit may only add files"):
        exporting.export_commits(git_dir, commits, module_rows=frozenset({"envs-knob"}))


def test_export_reads_only_and_leaves_the_fork_untouched(tmp_path: Path) -> None:
    repo = tmp_path / "fork"
    base, _ = make_fork(repo)
    (repo / "vllm" / "envs.py").write_bytes(b"dirty\n")
    git_dir = repo / ".git"

    def state() -> tuple[bytes, ...]:
        return (
            (git_dir / "index").read_bytes(),
            (git_dir / "HEAD").read_bytes(),
            (git_dir / "config").read_bytes(),
            sh(["for-each-ref"], cwd=repo),
            sh(["status", "--porcelain=v1"], cwd=repo),
            sh(["count-objects", "-v"], cwd=repo),
        )

    before = state()
    _export(repo, base)
    assert state() == before


def test_every_pinned_option_has_a_reason() -> None:
    for option, pin, why in formatpatch.FORMAT_PATCH_OPTIONS:
        assert option or pin
        assert why.strip()
    argv = formatpatch.format_patch_argv("HEAD")
    assert "--zero-commit" in argv and "--full-index" in argv
    assert len(FORK_COMMITS) == 4
    assert os.devnull == "/dev/null"


def test_pins_alone_beat_a_hostile_repository_config(tmp_path: Path, isolated_env: Path) -> None:
    """Without the scratch view: format-patch run on the fork itself, whose .git/config and global file
    set every knob, still gives the clean bytes; the command-line pins are enough for config."""
    repo = tmp_path / "fork"
    base, shas = make_fork(repo)
    clean = _export(repo, base)
    make_hostile(repo, isolated_env)
    git_dir = gitrun.git_dir_of(repo)
    # Attributes are the one leak config pins cannot close (info/attributes, .gitattributes): remove
    # them here; the scratch view is what closes them in export.
    (git_dir / "info" / "attributes").unlink()
    (repo / ".gitattributes").unlink()
    for sha in shas:
        assert formatpatch.format_commit(git_dir, sha) == clean[sha]


def test_docs_table_lists_every_pinned_option() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "fork.md").read_text()
    for option, pin, _why in formatpatch.FORMAT_PATCH_OPTIONS:
        if option:
            assert f"| `{option}` |" in text, option
        if pin:
            assert f"`{pin[0]}={pin[1]}`" in text, pin


def test_empty_commit_refused_and_benign_lines_accepted(tmp_path: Path) -> None:
    repo = tmp_path / "fork"
    base, _ = make_fork(repo)
    benign = _extra_commit(
        repo,
        FixtureCommit(
            "benign",
            "Explain without a diff",
            {b"vllm/nonl.py": b"x = 3\n"},
            body="diff between runs is small\n-- a dash line\n+ a plus line\n@@ not a hunk",
        ),
    )
    out = _export(repo, base)
    assert b"diff between runs is small\n" in out[benign]  # type: ignore[operator]
    sh(["commit", "-q", "--allow-empty", "-m", "Nothing\n\nHqp-Row: nothing"], cwd=repo)
    with pytest.raises(FindingError, match="'Nothing': an empty commit"):
        _export(repo, base)


def test_a_diffish_message_really_misleads_gnu_patch(tmp_path: Path) -> None:
    """Why the refusal exists: GNU patch reads a message's '--- a/x' / '+++ b/x' / '@@' lines as a diff."""
    from conftest import require_gnu_patch

    patch = require_gnu_patch()
    work = tmp_path / "work"
    work.mkdir()
    (work / "x").write_bytes(b"one\n")
    text = (
        b"Subject: [PATCH] example\n\nBefore:\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-one\n+ONE\n\n"
        b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-one\n+two\n"
    )
    import subprocess

    proc = subprocess.run(
        [patch, "-p1", "--fuzz", "0", "--forward", "--batch"],
        cwd=work,
        input=text,
        capture_output=True,
        check=False,
    )
    # The message's hunk is applied first; the real one then fails on the changed line.
    assert proc.returncode != 0
    assert (work / "x").read_bytes() == b"ONE\n"
    assert len(refusals.diffish_lines(text.split(b"\n\n", 1)[1].split(b"\ndiff --git")[0])) == 3


def test_non_ascii_long_subject_is_raw_utf8_and_survives_import(tmp_path: Path) -> None:
    repo = tmp_path / "fork"
    base, shas = make_fork(repo)
    text = _export(repo, base)[shas[3]]
    assert isinstance(text, bytes)
    assert "naïve café".encode() in text and b"=?UTF-8?" not in text
    assert b"Content-Type: text/plain; charset=UTF-8" in text


def test_the_package_a_commit_must_stay_in_is_the_manifests(tmp_path: Path) -> None:
    """``export`` refuses a change outside the manifest's package, whatever its name: a series of
    another package than vLLM has its own directory (#41: ``vllm/`` was written into the refusal)."""
    repo = tmp_path / "fork"
    base, _ = make_fork(repo)
    other = _extra_commit(repo, FixtureCommit("other", "Touch mypkg", {b"mypkg/x.py": b"x = 1\n"}))
    git_dir = gitrun.git_dir_of(repo)
    commit = next(c for c in forkgit.list_commits(git_dir, base, other) if c.sha == other)
    assert refusals.refusals(git_dir, commit, package="mypkg") == []
    assert refusals.refusals(git_dir, commit) == [
        "touches mypkg/x.py, outside vllm/: the series patches the vllm package only; move that "
        "change to another commit off the export point"
    ]
    vllm_commit = next(c for c in forkgit.list_commits(git_dir, base, other) if c.sha != other)
    assert any(
        "outside mypkg/" in p for p in refusals.refusals(git_dir, vllm_commit, package="mypkg")
    )

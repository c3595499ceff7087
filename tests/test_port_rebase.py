"""``port --rebase`` and the retirement check, on real git repositories and small real trees.

The old fork branch is built with ``import`` from a real manifest on a tiny 0.29.0 "release"; the port
to a tiny 0.30.0 has one row of each kind (applies at an offset, already upstream, partly upstream,
conflicts). The fork's work tree and index are left dirty on purpose: port reads only commits and
must leave them, HEAD and the old branch exactly as they were.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from hyperqwen_patches.checks.pipeline import run_check
from hyperqwen_patches.errors import GitError, UsageError
from hyperqwen_patches.fork import importing
from hyperqwen_patches.port.model import RebaseRequest
from hyperqwen_patches.port.run import port
from hyperqwen_patches.series.manifest import load_manifest
from hyperqwen_patches.sources.pristine import open_pristine
from tests.test_port import BASE, lines_with, make_patch, make_repo, release


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def show_file(fork: Path, rev: str, path: str) -> str:
    return git(fork, "show", f"{rev}:{path}") + "\n"


OURS_A = lines_with({20: "line 20 ours\n"})
OURS_UP = lines_with({10: "line 10 ours\n"})
OURS_PART = lines_with({10: "line 10 ours\n", 30: "line 30 ours\n"})
OURS_CONF = lines_with({20: "line 20 ours\n"})


@pytest.fixture
def ported(tmp_path: Path) -> dict[str, object]:
    files = ("a", "up", "part", "conf")
    old = release(tmp_path, "old", {f"vllm/{f}.py": BASE for f in files})
    new = release(
        tmp_path,
        "new",
        {
            "vllm/a.py": "".join(f"new {i}\n" for i in range(4)) + BASE,  # offset +4
            "vllm/up.py": OURS_UP,  # the whole row is upstream
            "vllm/part.py": lines_with({10: "line 10 ours\n"}),  # its first hunk is upstream
            "vllm/conf.py": lines_with({19: "line 19 upstream\n"}),  # a context line changed
        },
    )
    w = tmp_path / "w"
    rows = [
        ("row-a", make_patch("vllm/a.py", BASE, OURS_A, w)),
        ("row-up", make_patch("vllm/up.py", BASE, OURS_UP, w)),
        ("row-part", make_patch("vllm/part.py", BASE, OURS_PART, w)),
        ("row-conf", make_patch("vllm/conf.py", BASE, OURS_CONF, w)),
    ]
    repo = make_repo(tmp_path, rows)
    manifest_path = repo / "patches/manifest.yaml"
    manifest_path.write_text(
        manifest_path.read_text().replace(
            "rows:\n", "export_points:\n  - name: qwen\n    branch: qwen/0.29\nrows:\n"
        )
    )
    fork = tmp_path / "fork"
    importing.import_series(
        load_manifest(repo),
        fork,
        tree=open_pristine(f"dir:{old}", version="0.29.0"),
        create=True,
    )
    # Uncommitted state in the fork: a modified tracked-nowhere file, staged and unstaged.
    (fork / "scratch.txt").write_text("work in progress\n")
    git(fork, "add", "scratch.txt")
    (fork / "scratch.txt").write_text("more work, unstaged\n")
    before = {
        "old": git(fork, "rev-parse", "qwen/0.29"),
        "status": git(fork, "status", "--porcelain"),
        "head": git(fork, "symbolic-ref", "HEAD"),
        "index": (fork / ".git/index").read_bytes(),
    }
    report, rebased = port(
        repo,
        "0.30.0",
        from_source=f"dir:{old}",
        to_source=f"dir:{new}",
        rebase=RebaseRequest(fork=fork),
    )
    return {
        "repo": repo,
        "old": old,
        "new": new,
        "fork": fork,
        "report": report,
        "rebased": rebased,
        "before": before,
    }


def test_rebase_builds_new_branch_from_rows_that_go_through(ported: dict) -> None:
    report, rebased, fork = ported["report"], ported["rebased"], ported["fork"]
    assert [(r.name, r.status) for r in report.rows] == [
        ("row-a", "offset"),
        ("row-up", "upstream"),
        ("row-part", "partly-upstream"),
        ("row-conf", "conflicts"),
    ]
    assert rebased is not None
    assert rebased.branch == "qwen/0.30"  # the export point's branch, new version
    assert [row for row, _ in rebased.commits] == ["row-a", "row-part"]
    assert rebased.conflicts == ("row-conf",) and rebased.upstream == ("row-up",)
    assert git(fork, "rev-parse", "qwen/0.30") == rebased.tip
    # The base is the new release's deterministic base commit.
    assert git(fork, "log", "-1", "--format=%s", rebased.base) == "vllm 0.30.0 pristine tree"
    assert git(fork, "rev-list", "--count", f"{rebased.base}..{rebased.tip}") == "2"
    # Offsets refreshed: row-a's change is in the new file at its new place.
    new_a = "".join(f"new {i}\n" for i in range(4)) + OURS_A
    assert show_file(fork, "qwen/0.30", "vllm/a.py") == new_a
    # The partly-upstream row keeps the hunk that still applied; the file ends up as the row meant.
    assert show_file(fork, "qwen/0.30", "vllm/part.py") == OURS_PART
    # The conflicting row is not on the branch; the upstream row's file is the release's own.
    assert show_file(fork, "qwen/0.30", "vllm/conf.py") == lines_with({19: "line 19 upstream\n"})
    assert show_file(fork, "qwen/0.30", "vllm/up.py") == OURS_UP


def test_rebase_messages_and_notes(ported: dict) -> None:
    fork, rebased = ported["fork"], ported["rebased"]
    sha_a, sha_part = (sha for _, sha in rebased.commits)
    old_a = git(fork, "rev-list", "--reverse", "qwen/0.29").split()[1]
    # Same message and author as the old fork commit (read from the commit, not the work tree).
    assert git(fork, "log", "-1", "--format=%B%an%ad", sha_a) == git(
        fork, "log", "-1", "--format=%B%an%ad", old_a
    )
    message = git(fork, "log", "-1", "--format=%B", sha_part)
    assert "Ported to vllm 0.30.0: vllm/part.py hunk #1 dropped, already upstream." in message
    assert message.rstrip().endswith("Hqp-Row: row-part")  # the trailer stays last
    assert rebased.messages_from == "fork"


def test_rebase_leaves_old_branch_work_tree_and_index_alone(ported: dict) -> None:
    fork, before = ported["fork"], ported["before"]
    assert git(fork, "rev-parse", "qwen/0.29") == before["old"]
    assert git(fork, "status", "--porcelain") == before["status"]
    assert git(fork, "symbolic-ref", "HEAD") == before["head"]
    assert (fork / ".git/index").read_bytes() == before["index"]
    assert (fork / "scratch.txt").read_text() == "more work, unstaged\n"


def test_rebase_is_deterministic_and_refuses_to_clobber(ported: dict) -> None:
    repo, old, new, fork = ported["repo"], ported["old"], ported["new"], ported["fork"]
    rebased = ported["rebased"]
    sources = {"from_source": f"dir:{old}", "to_source": f"dir:{new}"}
    with pytest.raises(GitError, match="already exists"):
        port(repo, "0.30.0", rebase=RebaseRequest(fork=fork), **sources)
    with pytest.raises(UsageError, match="never rewrites the old branch"):
        port(repo, "0.30.0", rebase=RebaseRequest(fork=fork, branch="qwen/0.29"), **sources)
    # Into a second, fresh repository: the same SHAs (fixed committer, author kept).
    other = fork.parent / "other"
    git(fork.parent, "clone", "-q", "--bare", str(fork), str(other))
    git(other, "branch", "-D", "qwen/0.30")
    _, again = port(repo, "0.30.0", rebase=RebaseRequest(fork=other), **sources)
    assert again is not None and again.tip == rebased.tip


def retire(repo: Path, row: str, pin: str, hunk: str | None = None) -> None:
    """Mark ``row`` skipped (kept for history) and add a retirement at ``pin``."""
    manifest = repo / "patches/manifest.yaml"
    text = manifest.read_text().replace(
        f"    patch: patches/{row}.patch\n",
        f"    patch: patches/{row}.patch\n    skip: retired upstream\n",
    )
    text += (
        f'retirements:\n  - row: {row}\n    pin: "{pin}"\n    upstream: test\n'
        f"    reason: carried upstream\n    evidence: port\n"
        + (f"    hunk: {hunk}\n" if hunk else "")
    )
    manifest.write_text(text)


def test_check_verifies_retirements(tmp_path: Path) -> None:
    """A retirement holds when the row reverse-applies on the pin's tree, and fails when it does not."""
    carried = release(tmp_path, "carried", {"vllm/up.py": OURS_UP})
    patch = make_patch("vllm/up.py", BASE, OURS_UP, tmp_path / "w")
    repo = make_repo(tmp_path, [("row-up", patch)])
    retire(repo, "row-up", "0.29.0")
    only = ("hyperqwen_patches.port.retirements:check_retirements",)
    good = run_check(repo, source=f"dir:{carried}", pipeline=only)
    assert [f for f in good.findings if f.check == "retirements"] == []

    not_carried = release(tmp_path, "plain", {"vllm/up.py": BASE})
    bad = run_check(repo, source=f"dir:{not_carried}", pipeline=only)
    (finding,) = bad.findings
    assert finding.severity == "error"
    assert finding.subject == "retirement of row-up at 0.29.0"
    assert "does not carry it" in finding.message


def test_check_verifies_hunk_retirements(tmp_path: Path) -> None:
    tree = release(tmp_path, "t", {"vllm/part.py": lines_with({10: "line 10 ours\n"})})
    patch = make_patch("vllm/part.py", BASE, OURS_PART, tmp_path / "w")
    only = ("hyperqwen_patches.port.retirements:check_retirements",)
    for hunk, expected in (
        ("vllm/part.py#1", []),
        ("vllm/part.py#2", ["error"]),  # hunk 2 is not in the tree
        ("vllm/part.py#7", ["warning"]),  # no such hunk (cut from the row when retired)
        ("vllm/part.py", ["error"]),  # not PATH#N
    ):
        root = tmp_path / hunk.replace("/", "_").replace("#", "_")
        root.mkdir()
        repo = make_repo(root, [("row-part", patch)])
        retire(repo, "row-part", "0.29.0", hunk)
        report = run_check(repo, source=f"dir:{tree}", pipeline=only)
        assert [f.severity for f in report.findings] == expected, (hunk, report.findings)


def test_after_rebase_export_and_check_work_on_the_new_branch(ported: dict) -> None:
    """The maintainer resolves the conflicting row on the new branch, points the manifest at the new
    pin and branch, retires the upstream row; then export and check run as on the old branch."""
    import sys

    repo, new, fork = ported["repo"], ported["new"], ported["fork"]
    work = fork.parent / "resolve"
    git(fork, "worktree", "add", "-q", str(work), "qwen/0.30")
    (work / "vllm/conf.py").write_text(lines_with({19: "line 19 upstream\n", 20: "line 20 ours\n"}))
    git(work, "commit", "-qam", "row-conf: re-cut on 0.30.0\n\nHqp-Row: row-conf")
    manifest = repo / "patches/manifest.yaml"
    text = manifest.read_text()
    text = text.replace('pin: "0.29.0"', 'pin: "0.30.0"')
    text = text.replace("source: pypi:vllm==0.29.0", f"source: dir:{new}")
    text = text.replace("branch: qwen/0.29", "branch: qwen/0.30")
    text = text.replace(
        "    patch: patches/row-up.patch\n",
        "    patch: patches/row-up.patch\n    skip: carried by vllm 0.30.0\n",
    )
    # The upstream row goes last as a skipped row kept for history: rows keep the fork's order.
    up_start = text.index("  - name: row-up\n")
    up_end = text.index("  - name: row-part\n")
    text = text[:up_start] + text[up_end:] + text[up_start:up_end]
    # Both candidates: the whole row-up, and hunk #1 of row-part (which the re-exported row-part no
    # longer has: check can only warn about that one).
    candidates = ported["report"].retirement_candidates
    assert [(c.row, c.hunk) for c in candidates] == [
        ("row-up", None),
        ("row-part", "vllm/part.py#1"),
    ]
    entries = "".join(c.to_yaml() for c in candidates)
    manifest.write_text(
        text + "retirements:\n" + "".join("  " + line + "\n" for line in entries.splitlines())
    )
    (repo / "docker").mkdir()
    (repo / "docker/requirements.txt").write_text("vllm==0.30.0\n")

    def hqp(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "hyperqwen_patches", *args, "--repo", str(repo)],
            capture_output=True,
            text=True,
            check=False,
        )

    exported = hqp("export", "--fork", str(fork))
    assert exported.returncode == 0, exported.stdout + exported.stderr
    assert "row-conf" in (repo / "patches/row-conf.patch").read_text()
    checked = hqp("check", "--fork", str(fork), "--json")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    findings = json.loads(checked.stdout)["findings"]
    # The row retirement is verified on the new pin; the hunk retirement names a hunk number of the
    # row before its re-cut, which check says it cannot verify.
    # The rows were cut against 0.29.0, which a dir: source names no source for: not compared.
    assert [(f["check"], f["severity"], f["subject"]) for f in findings] == [
        ("retirements", "warning", "retirement of row-part at 0.30.0 (vllm/part.py#1)"),
        ("names", "unverified", "cut_against 0.29.0"),
    ]

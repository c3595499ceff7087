"""``port --rebase`` and the retirement check, on real git repositories and small real trees.

The old fork branch is built with ``import`` from a real manifest on a tiny 0.29.0 "release"; the port
to a tiny 0.30.0 has one row of each kind (applies at an offset, already upstream, partly upstream,
conflicts). The fork's work tree and index are left dirty on purpose: port reads only commits and
must leave them, HEAD and the old branch exactly as they were.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from hyperqwen_patches.checks.pipeline import run_check
from hyperqwen_patches.errors import GitError, UsageError
from hyperqwen_patches.port.model import RebaseRequest, RebaseResult
from hyperqwen_patches.port.rebase import abort_rebase
from hyperqwen_patches.port.retirements import check_retirements
from hyperqwen_patches.port.run import port
from tests.test_port import (
    BASE,
    forked_series,
    lines_with,
    make_patch,
    make_repo,
    release,
    require_gnu_patch,
)


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
# row-merge changes line 20; the release changed line 17, inside the hunk's context (fuzz 0 fails) but
# two lines away from the change (a three-way merge takes both). row-after builds on row-merge.
OURS_MERGE = lines_with({20: "line 20 merged\n"})
OURS_AFTER = lines_with({20: "line 20 merged\n", 22: "line 22 after\n"})
UPSTREAM_MERGE = lines_with({17: "line 17 upstream\n"})
RESOLVED_CONF = lines_with({19: "line 19 upstream\n", 20: "line 20 ours\n"})


def sources(ported: dict) -> dict[str, str]:
    return {"from_source": f"dir:{ported['old']}", "to_source": f"dir:{ported['new']}"}


def go_on(ported: dict, action: str, **kw: object) -> RebaseResult:
    _, result = port(
        ported["repo"],
        "0.30.0",
        rebase=RebaseRequest(fork=ported["fork"], action=action, **kw),  # type: ignore[arg-type]
        **sources(ported),
    )
    assert result is not None
    return result


@pytest.fixture
def ported(tmp_path: Path) -> dict[str, object]:
    files = ("a", "up", "part", "merge", "conf")
    old = release(tmp_path, "old", {f"vllm/{f}.py": BASE for f in files})
    new = release(
        tmp_path,
        "new",
        {
            "vllm/a.py": "".join(f"new {i}\n" for i in range(4)) + BASE,  # offset +4
            "vllm/up.py": OURS_UP,  # the whole row is upstream
            "vllm/part.py": lines_with({10: "line 10 ours\n"}),  # its first hunk is upstream
            "vllm/merge.py": UPSTREAM_MERGE,
            "vllm/conf.py": lines_with({19: "line 19 upstream\n"}),  # the line next to the change
        },
    )
    w = tmp_path / "w"
    rows = [
        ("row-a", make_patch("vllm/a.py", BASE, OURS_A, w)),
        ("row-up", make_patch("vllm/up.py", BASE, OURS_UP, w)),
        ("row-part", make_patch("vllm/part.py", BASE, OURS_PART, w)),
        ("row-merge", make_patch("vllm/merge.py", BASE, OURS_MERGE, w)),
        ("row-after", make_patch("vllm/merge.py", OURS_MERGE, OURS_AFTER, w)),
        ("row-conf", make_patch("vllm/conf.py", BASE, OURS_CONF, w)),
    ]
    repo, fork = forked_series(tmp_path, rows, old)
    # Uncommitted state in the fork: a modified tracked-nowhere file, staged and unstaged.
    (fork / "scratch.txt").write_text("work in progress\n")
    git(fork, "add", "scratch.txt")
    (fork / "scratch.txt").write_text("more work, unstaged\n")
    before = {
        "old": git(fork, "rev-parse", "qwen/0.29"),
        "status": git(fork, "status", "--porcelain"),
        "head": git(fork, "symbolic-ref", "HEAD"),
        "index": (fork / ".git/index").read_bytes(),
        "branches": git(fork, "for-each-ref", "refs/heads"),
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


def test_triage_sees_a_conflict_and_a_cascade_where_the_rebase_merges(ported: dict) -> None:
    report = ported["report"]
    assert [(r.name, r.status) for r in report.rows] == [
        ("row-a", "offset"),
        ("row-up", "upstream"),
        ("row-part", "partly-upstream"),
        ("row-merge", "conflicts"),
        ("row-after", "conflicts"),
        ("row-conf", "conflicts"),
    ]
    after = next(r for r in report.rows if r.name == "row-after")
    assert after.cascade == ("row-merge",)


def test_gnu_patch_fails_the_rows_that_merge_file_merges(ported: dict, tmp_path: Path) -> None:
    """The oracle: GNU patch at fuzz 0 rejects row-merge on the new release; git merge-file (the same
    three files) merges it without a conflict, and gives what the rebase committed."""
    tree = tmp_path / "gnu"
    shutil.copytree(ported["new"], tree)
    patch_text = (ported["repo"] / "patches/row-merge.patch").read_text()
    proc = subprocess.run(
        [require_gnu_patch(), "-p1", "--fuzz=0", "--dry-run", "-d", str(tree)],
        input=patch_text,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and "FAILED" in proc.stdout
    for name, text in (("cur", UPSTREAM_MERGE), ("base", BASE), ("row", OURS_MERGE)):
        (tmp_path / name).write_text(text)
    merged = subprocess.run(
        ["git", "merge-file", "-p", str(tmp_path / "cur"), str(tmp_path / "base"),
         str(tmp_path / "row")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert merged.returncode == 0
    merge_commit = dict((r, c) for r, c, _ in ported["rebased"].commits)["row-merge"]
    assert show_file(ported["fork"], merge_commit, "vllm/merge.py") == merged.stdout


def test_rebase_pauses_at_the_row_that_needs_a_person(ported: dict) -> None:
    rebased, fork = ported["rebased"], ported["fork"]
    assert rebased.state == "paused"
    assert rebased.branch == "qwen/0.30"  # the export point's branch, new version
    assert [(row, how) for row, _, how in rebased.commits] == [
        ("row-a", "applied"),
        ("row-part", "partly-upstream"),
        ("row-merge", "merged"),
        ("row-after", "applied"),  # the cascade is gone once row-merge is on the branch
    ]
    assert rebased.merged == (("row-merge", (b"vllm/merge.py",)),)  # both sides changed it
    assert rebased.upstream == ("row-up",)
    paused = rebased.paused
    assert paused is not None and paused.row == "row-conf"
    assert [(show_path(f.path), f.how, f.conflicts) for f in paused.files] == [
        ("vllm/conf.py", "conflict", 1)
    ]
    assert paused.worktree == fork.parent / "fork-port-0.30.0"
    assert "--continue" in paused.resume
    # The worktree: detached at the last commit built, the row's file with diff3 markers.
    wt = paused.worktree
    assert git(wt, "rev-parse", "HEAD") == rebased.tip == rebased.commits[-1][1]
    text = (wt / "vllm/conf.py").read_text()
    assert "<<<<<<< vllm 0.30.0 + rows before\n" in text and ">>>>>>> row row-conf\n" in text
    assert "||||||| vllm 0.29.0 + rows before\n" in text
    assert git(wt, "status", "--porcelain") == "M vllm/conf.py"
    # No branch yet; the fork's own branches, HEAD, index and work tree as they were.
    assert git(fork, "for-each-ref", "refs/heads") == ported["before"]["branches"]
    assert (fork / ".git/hqp-port-rebase.json").exists()
    # The base is the new release's deterministic base commit; offsets refreshed.
    assert git(fork, "log", "-1", "--format=%s", rebased.base) == "vllm 0.30.0 pristine tree"
    new_a = "".join(f"new {i}\n" for i in range(4)) + OURS_A
    assert show_file(fork, rebased.tip, "vllm/a.py") == new_a
    assert show_file(fork, rebased.tip, "vllm/part.py") == OURS_PART
    assert show_file(fork, rebased.tip, "vllm/merge.py") == lines_with(
        {17: "line 17 upstream\n", 20: "line 20 merged\n", 22: "line 22 after\n"}
    )
    assert show_file(fork, rebased.tip, "vllm/up.py") == OURS_UP


def show_path(path: bytes) -> str:
    return path.decode()


def test_continue_refuses_markers_and_a_second_start(ported: dict) -> None:
    with pytest.raises(UsageError, match=r"conflict markers are still in vllm/conf.py:\d+"):
        go_on(ported, "continue")
    with pytest.raises(GitError, match=r"paused in .* at row row-conf"):
        port(ported["repo"], "0.30.0", rebase=RebaseRequest(fork=ported["fork"]), **sources(ported))
    # Emptied back to the last commit: the row would add nothing.
    wt = ported["rebased"].paused.worktree
    git(wt, "checkout", "--", "vllm/conf.py")
    with pytest.raises(UsageError, match="would add nothing"):
        go_on(ported, "continue")


def test_continue_commits_the_resolution_and_writes_the_branch(ported: dict) -> None:
    fork, paused = ported["fork"], ported["rebased"].paused
    (paused.worktree / "vllm/conf.py").write_text(RESOLVED_CONF)
    done = go_on(ported, "continue")
    assert done.state == "done" and done.ok and done.paused is None
    assert [(row, how) for row, _, how in done.commits][-1] == ("row-conf", "resolved")
    assert git(fork, "rev-parse", "qwen/0.30") == done.tip
    assert git(fork, "rev-list", "--count", f"{done.base}..{done.tip}") == "5"
    assert show_file(fork, "qwen/0.30", "vllm/conf.py") == RESOLVED_CONF
    message = git(fork, "log", "-1", "--format=%B", "qwen/0.30")
    assert "by hand: vllm/conf.py resolved in a three-way merge" in message
    assert message.rstrip().endswith("Hqp-Row: row-conf")
    # The worktree and the state are gone; git no longer lists the worktree.
    assert not paused.worktree.exists()
    assert not (fork / ".git/hqp-port-rebase.json").exists()
    assert str(paused.worktree) not in git(fork, "worktree", "list")
    with pytest.raises(UsageError, match="no port --rebase is paused"):
        go_on(ported, "continue")


def test_continue_takes_the_persons_own_commit(ported: dict) -> None:
    fork, paused = ported["fork"], ported["rebased"].paused
    wt = paused.worktree
    (wt / "vllm/conf.py").write_text(RESOLVED_CONF)
    git(wt, "-c", "user.name=Person", "-c", "user.email=p@example.com", "commit", "-qam",
        "row-conf: on 0.30.0\n\nHqp-Row: row-conf")  # fmt: skip
    own = git(wt, "rev-parse", "HEAD")
    done = go_on(ported, "continue")
    assert done.commits[-1] == ("row-conf", own, "resolved")
    assert git(fork, "rev-parse", "qwen/0.30") == own


def test_skip_leaves_the_row_out_and_abort_drops_everything(ported: dict) -> None:
    fork = ported["fork"]
    skipped = go_on(ported, "skip")
    assert skipped.state == "done" and not skipped.ok
    assert skipped.skipped == ("row-conf",) and skipped.conflicts == ("row-conf",)
    assert git(fork, "rev-parse", "qwen/0.30") == skipped.tip == ported["rebased"].tip
    # Once more, to abort: the branch must be moved (--force), and abort writes nothing.
    _, again = port(
        ported["repo"], "0.30.0", rebase=RebaseRequest(fork=fork, force=True), **sources(ported)
    )
    assert again is not None and again.state == "paused"
    saved, removed = abort_rebase(fork)
    assert saved.row == "row-conf"
    assert [p.resolve() for p in removed] == [again.paused.worktree.resolve()]
    assert not again.paused.worktree.exists()
    assert not (fork / ".git/hqp-port-rebase.json").exists()
    assert git(fork, "rev-parse", "qwen/0.30") == skipped.tip  # untouched by the aborted run


def test_rebase_messages_and_notes(ported: dict) -> None:
    fork, rebased = ported["fork"], ported["rebased"]
    sha_a, sha_part, sha_merge = (sha for _, sha, _ in rebased.commits[:3])
    old_a = git(fork, "rev-list", "--reverse", "qwen/0.29").split()[1]
    # Same message and author as the old fork commit (read from the commit, not the work tree).
    assert git(fork, "log", "-1", "--format=%B%an%ad", sha_a) == git(
        fork, "log", "-1", "--format=%B%an%ad", old_a
    )
    message = git(fork, "log", "-1", "--format=%B", sha_part)
    assert "Ported to vllm 0.30.0: vllm/part.py hunk #1 dropped, already upstream." in message
    assert message.rstrip().endswith("Hqp-Row: row-part")  # the trailer stays last
    assert "Ported to vllm 0.30.0 by a three-way merge; both sides changed vllm/merge.py." in git(
        fork, "log", "-1", "--format=%B", sha_merge
    )
    assert rebased.messages_from == "fork"


def test_rebase_leaves_old_branch_work_tree_and_index_alone(ported: dict) -> None:
    fork, before = ported["fork"], ported["before"]
    (ported["rebased"].paused.worktree / "vllm/conf.py").write_text(RESOLVED_CONF)
    go_on(ported, "continue")
    assert git(fork, "rev-parse", "qwen/0.29") == before["old"]
    assert git(fork, "status", "--porcelain") == before["status"]
    assert git(fork, "symbolic-ref", "HEAD") == before["head"]
    assert (fork / ".git/index").read_bytes() == before["index"]
    assert (fork / "scratch.txt").read_text() == "more work, unstaged\n"


def test_rebase_is_deterministic_and_refuses_to_clobber(ported: dict) -> None:
    repo, fork = ported["repo"], ported["fork"]
    done = go_on(ported, "skip")
    with pytest.raises(GitError, match="already exists"):
        port(repo, "0.30.0", rebase=RebaseRequest(fork=fork), **sources(ported))
    with pytest.raises(UsageError, match="never rewrites the old branch"):
        port(repo, "0.30.0", rebase=RebaseRequest(fork=fork, branch="qwen/0.29"), **sources(ported))
    # Into a second, fresh repository: the same SHAs (fixed committer, author kept).
    other = fork.parent / "other"
    git(fork.parent, "clone", "-q", "--bare", str(fork), str(other))
    git(other, "branch", "-D", "qwen/0.30")
    _, again = port(
        repo,
        "0.30.0",
        rebase=RebaseRequest(fork=other, worktree=fork.parent / "wt2"),
        **sources(ported),
    )
    assert again is not None and again.state == "paused"
    assert [c for _, c, _ in again.commits] == [c for _, c, _ in done.commits]
    assert again.paused.worktree == fork.parent / "wt2"


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
    only = (check_retirements,)
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
    only = (check_retirements,)
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
    (ported["rebased"].paused.worktree / "vllm/conf.py").write_text(RESOLVED_CONF)
    assert go_on(ported, "continue").ok
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


def test_the_command_pauses_continues_and_aborts(ported: dict) -> None:
    """The CLI: exit 2 with the markers named, exit 0 once resolved (--to and the sources come from
    the paused state), exit 1 and the worktree named when it pauses; every --json document valid."""
    import sys

    import jsonschema

    from tests.test_json_schemas import schema as load_schema

    repo, fork = ported["repo"], ported["fork"]
    schema = load_schema("port")

    def hqp(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "hyperqwen_patches", "port", *args, "--repo", str(repo)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip

    left = hqp("--rebase", "--continue", "--fork", str(fork))
    assert left.returncode == 2 and "conflict markers are still in vllm/conf.py:" in left.stderr
    (ported["rebased"].paused.worktree / "vllm/conf.py").write_text(RESOLVED_CONF)
    done = hqp("--rebase", "--continue", "--fork", str(fork), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    jsonschema.Draft202012Validator(schema).validate(doc)
    rebase = doc["reports"][0]["rebase"]
    assert rebase["state"] == "done" and rebase["commits"][-1]["how"] == "resolved"
    # going on is no second triage: the rows were triaged when the rebase started
    assert doc["reports"][0]["triaged"] is False and doc["reports"][0]["rows"] == []
    assert "port: triaging" not in done.stderr and "port --rebase:" in done.stderr

    src = ["--from-source", f"dir:{ported['old']}", "--source", f"dir:{ported['new']}"]
    again = hqp("--to", "0.30.0", *src, "--rebase", "--force", "--fork", str(fork))
    assert again.returncode == 1
    assert (
        "row row-conf needs you" in again.stdout and "vllm/conf.py: 1 conflict(s)" in again.stdout
    )
    assert "--rebase --continue" in again.stderr
    # A --skip reports what its run did: the earlier rows' commits in one line, not again each.
    skipped = hqp("--rebase", "--skip", "--fork", str(fork))
    assert skipped.returncode == 1, skipped.stderr
    assert "commit(s) of the runs before this one" in skipped.stdout
    assert "row-a  [applied]" not in skipped.stdout
    again = hqp("--to", "0.30.0", *src, "--rebase", "--force", "--fork", str(fork))
    assert again.returncode == 1
    aborted = hqp("--rebase", "--abort", "--fork", str(fork), "--json")
    assert aborted.returncode == 0, aborted.stderr
    doc = json.loads(aborted.stdout)
    jsonschema.Draft202012Validator(schema).validate(doc)
    assert doc["aborted"]["row"] == "row-conf"
    paused = hqp("--to", "0.30.0", *src, "--rebase", "--force", "--fork", str(fork), "--json")
    assert paused.returncode == 1
    jsonschema.Draft202012Validator(schema).validate(json.loads(paused.stdout))
    assert json.loads(paused.stdout)["reports"][0]["rebase"]["paused"]["row"] == "row-conf"
    assert hqp("--rebase", "--skip", "--abort", "--fork", str(fork)).returncode == 2


def test_a_second_rebase_while_one_runs_is_refused(ported: dict) -> None:
    """The lock a running port --rebase holds on the fork (held here by the test itself): a second
    --continue, --skip or --abort is refused with one line and changes nothing."""
    import fcntl

    fork = ported["fork"]
    state = (fork / ".git/hqp-port-rebase.json").read_bytes()
    with open(fork / ".git/hqp-port-rebase.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        for action in ("continue", "skip"):
            with pytest.raises(GitError, match="another port --rebase is running"):
                go_on(ported, action)
        with pytest.raises(GitError, match="another port --rebase is running"):
            abort_rebase(fork)
    assert (fork / ".git/hqp-port-rebase.json").read_bytes() == state
    assert ported["rebased"].paused.worktree.exists()
    assert go_on(ported, "skip").state == "done"  # released: it goes on


def test_a_tampered_state_deletes_nothing_it_names(ported: dict, tmp_path: Path) -> None:
    """--abort removes only the worktrees a rebase opened in this fork (git lists them, locked by
    it), never the path a state file names: a state pointing at any directory deletes nothing."""
    fork = ported["fork"]
    victim = tmp_path / "precious"
    (victim / "deep").mkdir(parents=True)
    (victim / "deep/file.txt").write_text("keep me\n")
    state_file = fork / ".git/hqp-port-rebase.json"
    state = json.loads(state_file.read_text())
    state["worktree"] = str(victim)
    state_file.write_text(json.dumps(state))
    real = ported["rebased"].paused.worktree
    saved, removed = abort_rebase(fork)
    assert saved.worktree == str(victim)
    assert (victim / "deep/file.txt").read_text() == "keep me\n"
    assert [p.resolve() for p in removed] == [real.resolve()] and not real.exists()
    assert not state_file.exists()


@pytest.mark.parametrize("damage", ["truncated", "not json", "wrong keys"])
def test_a_damaged_state_is_named_and_abort_still_clears_it(ported: dict, damage: str) -> None:
    fork = ported["fork"]
    state_file = fork / ".git/hqp-port-rebase.json"
    text = state_file.read_text()
    state_file.write_text(
        {
            "truncated": text[: len(text) // 2],
            "not json": "\x00\x01",
            "wrong keys": json.dumps({"format": 1, "nonsense": True}),
        }[damage]
    )
    with pytest.raises(GitError, match=r"hqp-port-rebase\.json: (unreadable|damaged)") as info:
        go_on(ported, "continue")
    assert "--abort" in (info.value.hint or "")
    real = ported["rebased"].paused.worktree
    saved, removed = abort_rebase(fork)
    assert saved is None
    assert [p.resolve() for p in removed] == [real.resolve()] and not real.exists()
    assert not state_file.exists()


def test_a_paused_state_keeps_its_sources_absolute(ported: dict, tmp_path: Path) -> None:
    """Started with relative dir: sources, the rebase goes on from another directory with the trees
    it started with: a decoy at the same relative path there is never read."""
    import sys

    fork, repo = ported["fork"], ported["repo"]
    abort_rebase(fork)

    def hqp(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "hyperqwen_patches", "port", *args, "--repo", str(repo)],
            cwd=cwd, capture_output=True, text=True, check=False,
        )  # fmt: skip

    here = ported["old"].parent
    started = hqp(here, "--to", "0.30.0", "--from-source", "dir:old", "--source", "dir:new",
                  "--rebase", "--force", "--fork", str(fork))  # fmt: skip
    assert started.returncode == 1, started.stderr
    state = json.loads((fork / ".git/hqp-port-rebase.json").read_text())
    assert state["to_source"] == f"dir:{ported['new'].resolve()}"
    assert state["from_source"] == f"dir:{ported['old'].resolve()}"
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "new/vllm").mkdir(parents=True)  # a decoy release at the relative path
    (elsewhere / "new/vllm/conf.py").write_text("decoy\n")
    (Path(state["worktree"]) / "vllm/conf.py").write_text(RESOLVED_CONF)
    done = hqp(elsewhere, "--rebase", "--continue", "--fork", str(fork))
    assert done.returncode == 0, done.stderr

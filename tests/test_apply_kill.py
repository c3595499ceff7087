"""``apply`` killed at many points of its run, as real processes: the directory ends pristine or
fully patched, byte for byte, never in between.

The incident: 30 of 30 SIGKILLs in the rename phase of a 300-patch apply left a half-patched tree
(18-640 files patched) and thousands of ``.hqp-tmp-*`` files no later run noticed; 8 of 8 SIGTERMs
(what ``timeout`` and ``docker stop`` send) the same; Ctrl-C left exactly one file patched. The
rollback lived in memory. Now a journal is written before the first rename (sources/journal.py):
after a SIGKILL the next ``apply`` puts the files back first; SIGTERM and SIGINT put them back
before the process exits (exit 130; 143 for SIGTERM).

The kill points are spread over the whole run (start-up, reading, placing, writing), measured from
one untimed run of the same work; whatever point a kill lands on, the assertions are the same. Where
a case must be reached for certain (mid-write, inside the journal's own write, just before the commit
point), the signal is sent from inside the run at that point (``tests/killpoints.py``), not after a
sleep: an earlier version only checked the mid-write case ``if "while writing" in err``, and its last
assertion (``0 in codes or any(c != 0 for c in codes)``) could not fail.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TEST_CACHE

from hyperqwen_patches.sources.tree import Tree

FILES = 600  # files the series rewrites: a write phase long enough to be hit many times
KILLS = 12


def make_series(tmp: Path) -> tuple[Path, list[Path]]:
    """A release of FILES files, and 30 patches of 20 files each (every file patched once)."""
    root = tmp / "release"
    (root / "vllm").mkdir(parents=True)
    for i in range(FILES):
        body = b"".join(b"line %d of file %d\n" % (k, i) for k in range(1, 41))
        (root / "vllm" / f"m{i:04d}.py").write_bytes(body)
    patches = []
    for p in range(30):
        parts = []
        for i in range(p * 20, p * 20 + 20):
            name = f"vllm/m{i:04d}.py".encode()
            parts.append(
                b"--- a/%s\n+++ b/%s\n@@ -19,5 +19,6 @@\n" % (name, name)
                + b"".join(b" line %d of file %d\n" % (k, i) for k in (19, 20))
                + b"-line 21 of file %d\n+LINE 21 of file %d\n+added in patch %d\n" % (i, i, p)
                + b"".join(b" line %d of file %d\n" % (k, i) for k in (22, 23))
            )
        path = tmp / f"{p:02d}.patch"
        path.write_bytes(b"".join(parts))
        patches.append(path)
    return root, patches


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() or p.is_symlink()
    }


def argv(tree: Path, patches: list[Path]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "hyperqwen_patches",
        "apply",
        str(tree),
        *[x for p in patches for x in ("--patch", str(p))],
    ]


@pytest.fixture(scope="module")
def states(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path], dict, dict, float]:
    tmp = tmp_path_factory.mktemp("kill")
    release, patches = make_series(tmp)
    pristine = snapshot(release)
    done = tmp / "done"
    subprocess.run(["cp", "-a", str(release), str(done)], check=True)
    start = time.perf_counter()
    # A module's fixture runs before the per-test isolation: the test cache is named here, so the
    # journal's key is made there and not in the user's cache.
    env = {**os.environ, "HQP_CACHE": str(TEST_CACHE)}
    proc = subprocess.run(argv(done, patches), capture_output=True, check=False, env=env)
    duration = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr
    patched = snapshot(done)
    assert patched != pristine
    return release, patches, pristine, patched, duration


def fresh(release: Path, dest: Path) -> Path:
    subprocess.run(["cp", "-a", str(release), str(dest)], check=True)
    return dest


def run_and_signal(tree: Path, patches: list[Path], sig: int, delay: float) -> tuple[int, str]:
    proc = subprocess.Popen(argv(tree, patches), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(delay)
    if proc.poll() is None:
        proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err.decode()


def debris(tree: Path) -> list[str]:
    return [str(p) for p in tree.rglob(".hqp-*")]


def delays(duration: float) -> list[float]:
    # From early start-up to just past the end of an unhindered run.
    return [duration * (0.2 + 0.9 * k / (KILLS - 1)) for k in range(KILLS)]


def test_sigkill_anywhere_then_the_next_apply_puts_everything_back(
    states: tuple[Path, list[Path], dict, dict, float], tmp_path: Path
) -> None:
    release, patches, pristine, patched, duration = states
    outcomes = []
    for k, delay in enumerate(delays(duration)):
        tree = fresh(release, tmp_path / f"k{k}")
        rc, _ = run_and_signal(tree, patches, signal.SIGKILL, delay)
        # What the next run sees first: the library call apply makes before reading anything.
        recovered = Tree(tree).recover_interrupted(strict=True)
        state = snapshot(tree)
        assert state in (pristine, patched), f"kill {k} at {delay:.2f}s left a half-patched tree"
        assert debris(tree) == []
        outcomes.append((rc, recovered is not None, state == patched))
        again = subprocess.run(argv(tree, patches), capture_output=True, check=False)
        assert again.returncode == 0, again.stderr
        assert snapshot(tree) == patched
    # The spread did reach the write phase (a journal was found) at least once, and both ends.
    assert any(found for _, found, _ in outcomes), outcomes
    assert any(rc == -signal.SIGKILL and not whole for rc, _, whole in outcomes), outcomes


KILLPOINTS = Path(__file__).with_name("killpoints.py")


def run_to(point: str, tree: Path, patches: list[Path]) -> subprocess.CompletedProcess[str]:
    """``apply`` with a signal planted at ``point`` of its write (``tests/killpoints.py``)."""
    args = argv(tree, patches)[3:]  # after `python -m hyperqwen_patches`
    return subprocess.run(
        [sys.executable, str(KILLPOINTS), point, *args], capture_output=True, text=True, check=False
    )


def test_the_next_apply_says_it_undid_an_interrupted_write(
    states: tuple[Path, list[Path], dict, dict, float], tmp_path: Path
) -> None:
    """A journal left by a write SIGKILLed after its 10th rename (of 600, in four threads): ``--check-applied`` refuses the
    half-written tree and so does ``--dry-run``, ``apply`` puts the 10 files back first, says so, then applies."""
    release, patches, pristine, patched, _ = states
    tree = fresh(release, tmp_path / "t")
    killed = run_to("rename:10", tree, patches)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (tree / ".hqp-journal").exists()
    state = snapshot(tree)
    assert state not in (pristine, patched)  # half written, as only a kill leaves it
    checked = subprocess.run(
        [*argv(tree, patches), "--check-applied"], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 2 and "interrupted write" in checked.stderr
    dry = subprocess.run(
        [*argv(tree, patches), "--dry-run"], capture_output=True, text=True, check=False
    )
    assert dry.returncode == 2 and "interrupted write" in dry.stderr
    assert snapshot(tree) == state  # refused: nothing read as a state of the series, or written
    proc = subprocess.run(argv(tree, patches), capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    # 10, or a few more: the other writer threads may finish a rename while the kill lands
    put_back = re.search(
        r"held an interrupted write; undone first \((\d+) files put back", proc.stderr
    )
    assert put_back and 10 <= int(put_back[1]) <= 14, proc.stderr
    assert snapshot(tree) == patched and debris(tree) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_sigterm_and_ctrl_c_put_everything_back_before_exiting(
    states: tuple[Path, list[Path], dict, dict, float], tmp_path: Path, sig: int
) -> None:
    """Signals spread over the whole run, as for SIGKILL. Every outcome is one of four, each with
    its own exit status, message and tree; none may be anything else."""
    release, patches, pristine, patched, duration = states
    code = 143 if sig == signal.SIGTERM else 130
    seen = []
    for k, delay in enumerate(delays(duration)):
        tree = fresh(release, tmp_path / f"s{k}")
        rc, err = run_and_signal(tree, patches, sig, delay)
        state = snapshot(tree)
        where = f"{sig!r} at {delay:.2f}s: rc {rc}, {err.strip()[-300:]!r}"
        assert debris(tree) == [], f"{where} left {debris(tree)}"
        if rc == 0:  # finished before the signal was sent
            outcome = "finished"
            assert state == patched, where
        elif "while writing" in err:  # stopped mid-write: put back, and it says so
            outcome = "put back"
            assert rc == code and "nothing was changed" in err, where
            assert state == pristine, where
        elif "every file was written" in err:  # stopped just after the commit point: whole
            outcome = "whole"
            assert rc == code and state == patched, where
        else:  # stopped outside the write: before it (start-up, reading, placing) or after
            outcome = "outside"
            assert rc in (code, -sig), where
            assert state in (pristine, patched), where
        seen.append(outcome)
    # The spread reached past start-up: at least one run was stopped by the signal, not finished.
    assert any(o != "finished" for o in seen), seen


@pytest.mark.parametrize("sig", ["TERM", "INT", "HUP"])
def test_a_signal_between_two_renames_puts_back_every_file(
    states: tuple[Path, list[Path], dict, dict, float], tmp_path: Path, sig: str
) -> None:
    """The mid-write case of the test above, made certain: the signal is sent right after the
    300th of 600 renames (from a writer thread: the threaded path)."""
    release, patches, pristine, _, _ = states
    tree = fresh(release, tmp_path / "t")
    proc = run_to(f"rename:300:{sig}", tree, patches)
    code = 143 if sig == "TERM" else 130
    assert proc.returncode == code, proc.stderr
    assert f"interrupted by SIG{sig} while writing to" in proc.stderr
    assert "nothing was changed (every file was put back)" in proc.stderr
    assert snapshot(tree) == pristine and debris(tree) == []


@pytest.mark.parametrize("point", ["journal-write", "journal-rename", "journal-renamed"])
def test_a_kill_while_the_journal_is_written_leaves_the_tree_whole(
    states: tuple[Path, list[Path], dict, dict, float], tmp_path: Path, point: str
) -> None:
    """SIGKILL inside the journal's own write: half its bytes out, complete but not yet renamed,
    renamed but its directory not yet synced. No file was touched; the next run finds either no
    journal (its temporary is debris it removes) or a whole one, never a torn one it trusts or
    refuses, and applies."""
    release, patches, pristine, patched, _ = states
    tree = fresh(release, tmp_path / "j")
    killed = run_to(point, tree, patches)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert {k: v for k, v in snapshot(tree).items() if ".hqp-" not in k} == pristine
    recovered = Tree(tree).recover_interrupted(strict=True)
    assert (recovered is not None) == (point == "journal-renamed")
    assert snapshot(tree) == pristine and debris(tree) == []
    proc = subprocess.run(argv(tree, patches), capture_output=True, check=False)
    assert proc.returncode == 0 and snapshot(tree) == patched


def test_a_kill_before_the_commit_point_removes_what_the_write_created(tmp_path: Path) -> None:
    """Every file in place, the journal not yet removed: the next run takes out the files and the
    directories the write created, puts back the one it deleted, and keeps the journal only until
    all of that is done."""
    root = tmp_path / "tree"
    (root / "vllm").mkdir(parents=True)
    (root / "vllm/old.py").write_bytes(b"a\nb\n")
    (root / "vllm/gone.py").write_bytes(b"x\n")
    pristine = snapshot(root)
    patch = tmp_path / "p.patch"
    patch.write_bytes(
        b"--- a/vllm/old.py\n+++ b/vllm/old.py\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n"
        b"--- /dev/null\n+++ b/vllm/new/deep/mod.py\n@@ -0,0 +1 @@\n+made\n"
        b"--- /dev/null\n+++ b/vllm/top.py\n@@ -0,0 +1 @@\n+made too\n"
        b"--- a/vllm/gone.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
    )
    killed = run_to("commit", root, [patch])
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (root / "vllm/new/deep/mod.py").exists() and not (root / "vllm/gone.py").exists()
    done = Tree(root).recover_interrupted(strict=True)
    assert done is not None and sorted(done.removed) == [b"vllm/new/deep/mod.py", b"vllm/top.py"]
    assert snapshot(root) == pristine and debris(root) == []
    assert not (root / "vllm/new").exists()


@pytest.mark.parametrize("error", [False, True], ids=["after-a-run", "after-an-error"])
def test_a_sigterm_after_the_run_is_not_a_traceback(tmp_path: Path, error: bool) -> None:
    """A SIGTERM that lands once the command's own handling is over (here: sent right after main()
    returns, or right after it reported an error) ends the process as a signal does, never with a
    Terminated traceback and exit 1 (seen in the spread test above: SIGTERM at 0.16 s, rc 1)."""
    repo = Path(__file__).resolve().parent.parent
    args = ["list", "--repo", str(tmp_path if error else repo)]
    script = (
        "import os, signal, sys, time\n"
        "from hyperqwen_patches import cli\n"
        f"sys.argv = ['hqp', *{args!r}]\n"
        "try:\n"
        "    cli.main()\n"
        "finally:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(5)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert proc.returncode == -signal.SIGTERM, (proc.returncode, proc.stderr[-500:])
    assert "Traceback" not in proc.stderr and "Terminated" not in proc.stderr

"""``apply`` killed at many points of its run, as real processes: the directory ends pristine or
fully patched, byte for byte, never in between.

The incident: 30 of 30 SIGKILLs in the rename phase of a 300-patch apply left a half-patched tree
(18-640 files patched) and thousands of ``.hqp-tmp-*`` files no later run noticed; 8 of 8 SIGTERMs
(what ``timeout`` and ``docker stop`` send) the same; Ctrl-C left exactly one file patched. The
rollback lived in memory. Now a journal is written before the first rename (sources/journal.py):
after a SIGKILL the next ``apply`` puts the files back first; SIGTERM and SIGINT put them back
before the process exits (exit 130; 143 for SIGTERM).

The kill points are spread over the whole run (start-up, reading, placing, writing), measured from
one untimed run of the same work; whatever point a kill lands on, the assertions are the same.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

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
    proc = subprocess.run(argv(done, patches), capture_output=True, check=False)
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


def test_the_next_apply_says_it_undid_an_interrupted_write(
    states: tuple[Path, list[Path], dict, dict, float], tmp_path: Path
) -> None:
    """A journal left by a killed write (made here by stopping one mid-rename by hand)."""
    release, patches, _, patched, _ = states
    tree = fresh(release, tmp_path / "t")
    from hyperqwen_patches.sources import journal

    real = os.path.realpath(os.fsencode(tree))
    original = (tree / "vllm/m0000.py").read_bytes()
    journal.write(real, [journal.Entry(b"vllm/m0000.py", original, 0o644)], [])
    (tree / "vllm/m0000.py").write_bytes(b"half written\n")
    (tree / "vllm/.hqp-tmp-leftover").write_bytes(b"x")
    checked = subprocess.run(
        [*argv(tree, patches), "--check-applied"], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 2 and "interrupted write" in checked.stderr
    proc = subprocess.run(argv(tree, patches), capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "held an interrupted write; undone first (1 files put back" in proc.stderr
    assert snapshot(tree) == patched and debris(tree) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_sigterm_and_ctrl_c_put_everything_back_before_exiting(
    states: tuple[Path, list[Path], dict, dict, float], tmp_path: Path, sig: int
) -> None:
    release, patches, pristine, patched, duration = states
    codes = []
    for k, delay in enumerate(delays(duration)):
        tree = fresh(release, tmp_path / f"s{k}")
        rc, err = run_and_signal(tree, patches, sig, delay)
        codes.append(rc)
        state = snapshot(tree)
        assert state in (pristine, patched), f"{sig!r} at {delay:.2f}s left a half-patched tree"
        assert debris(tree) == [], f"{sig!r} at {delay:.2f}s left {debris(tree)}"
        code = 143 if sig == signal.SIGTERM else 130
        if "while writing" in err:  # stopped mid-write: put back, and it says so
            assert rc == code and "nothing was changed" in err and state == pristine, err
        if "every file was written" in err:  # stopped just after the commit point: whole
            assert rc == code and state == patched, err
    assert 0 in codes or any(c != 0 for c in codes)


def test_a_kill_while_the_journal_is_written_leaves_no_debris(
    states: tuple[Path, list[Path], dict, dict, float], tmp_path: Path
) -> None:
    """Killed inside journal.write: only the journal's temporary file exists (no journal, no file
    touched); the next run removes it. A kill early in a run hit exactly this once in CI-like runs."""
    release, patches, pristine, patched, _ = states
    tree = fresh(release, tmp_path / "j")
    (tree / ".hqp-tmp-journal").write_bytes(b'{"format": 1, "entr')
    assert Tree(tree).recover_interrupted(strict=True) is None
    assert snapshot(tree) == pristine and debris(tree) == []
    proc = subprocess.run(argv(tree, patches), capture_output=True, check=False)
    assert proc.returncode == 0 and snapshot(tree) == patched

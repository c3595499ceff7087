"""``apply`` never writes outside DIR, and one run writes to a DIR at a time.

The incidents (issue 43, found by attacking the landed tool):

- a planted ``DIR/.hqp-journal`` plus a symlink ``DIR/link -> /elsewhere`` made the next ``apply``
  write the journal's bytes through the link and delete a file there as "created" (as root in an
  image build, with no race);
- the write refused a directory swapped for a symlink mid-run, but the rollback that followed wrote
  DIR's original bytes into the outside directory (100 of 100 files there overwritten), deleted a
  file there, then printed "nothing was changed";
- 8 ``apply`` runs at once shared one journal: in 5 of 16 rounds a run exited 0 while the tree ended
  pristine or half patched, with up to 5,399 temporaries left;
- a patched setuid file kept its setuid bit (GNU patch and git write 0755).

The swaps happen at a fixed point of the write (a wrapper around ``os.rename`` or the journal's
read), not after a sleep, so each test does the same thing on every run.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_apply_cli import snapshot

from hyperqwen_patches.sources import journal
from hyperqwen_patches.sources.tree import Tree, TreeBusy, TreeError, TreeWriteError


def run(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", "apply", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "COLUMNS": "400", **(env or {})},
    )


def debris(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob(".hqp-*"))


def body(name: str) -> bytes:
    return b"".join(b"line %d of %s\n" % (k, name.encode()) for k in range(1, 9))


def edit(name: str) -> bytes:
    """A patch that changes line 4 of ``body(name)`` at ``vllm/<name>``."""
    path = f"vllm/{name}".encode()
    n = name.encode()
    return (
        b"--- a/%s\n+++ b/%s\n@@ -3,3 +3,3 @@\n line 3 of %s\n-line 4 of %s\n+LINE 4 of %s\n"
        b" line 5 of %s\n" % (path, path, n, n, n, n)
    )


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    """DIR (vllm/a.py, vllm/sub/b.py, vllm/sub/c.py, vllm/z.py) and an outside directory holding
    files of the same names, which nothing may touch."""
    root = tmp_path / "site-packages"
    (root / "vllm/sub").mkdir(parents=True)
    for name in ("a.py", "sub/b.py", "sub/c.py", "z.py"):
        (root / "vllm" / name).write_bytes(body(name))
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("b.py", "c.py", "victim.py"):
        (outside / name).write_bytes(b"outside's own %s\n" % name.encode())
    return root, outside


# What a write of ``edit`` of every file of ``places`` writes.
CHANGES: dict[bytes, bytes | None] = {
    b"vllm/" + n.encode(): body(n).replace(b"line 4", b"LINE 4")
    for n in ("a.py", "sub/b.py", "sub/c.py", "z.py")
}


# --- a forged journal ------------------------------------------------------------------------------


def forged(entries: list[journal.Entry]) -> bytes:
    """A journal as anyone who can write to DIR can make one: the document without a signature."""
    return journal._dumps(entries, [])


def signed_for(root: Path, entries: list[journal.Entry]) -> bytes:
    """One signed with this user's key (as only our own writer can make it)."""
    key = journal.signing_key(create=True)
    assert key is not None
    doc = journal._dumps(entries, [])
    real = os.path.realpath(os.fsencode(root))
    return journal.MAGIC + journal._mac(key, real, doc) + b"\n" + doc


@pytest.mark.parametrize("kind", ["unsigned", "signed-through-a-link"])
def test_a_forged_journal_is_refused_by_name_and_nothing_is_written(
    places: tuple[Path, Path], tmp_path: Path, kind: str
) -> None:
    """A journal that would write through ``DIR/link`` into the outside directory and delete a file
    there as "created". Unsigned: refused as not ours. Signed (as if ours, and a directory had
    become a link since): refused because the way passes a link. Either way exit 2, one line that
    names the journal and a hint, and not one byte written, inside DIR or out."""
    root, outside = places
    (root / "link").symlink_to(outside)
    entries = [
        journal.Entry(b"link/b.py", b"the journal's bytes\n", 0o4755),
        journal.Entry(b"link/victim.py", None, None),
        journal.Entry(b"vllm/a.py", b"also the journal's\n", 0o4755),
    ]
    data = forged(entries) if kind == "unsigned" else signed_for(root, entries)
    (root / ".hqp-journal").write_bytes(data)
    inside, out = snapshot(root), snapshot(outside)
    patch = tmp_path / "a.patch"
    patch.write_bytes(edit("a.py"))
    proc = run(root, "--patch", patch)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 2 and lines[1].startswith("hint: "), proc.stderr
    assert "refusing the write journal" in lines[0] and "/.hqp-journal" in lines[0]
    assert "nothing was written" in lines[0] and "remove" in lines[1]
    why = "not signed" if kind == "unsigned" else "passes link, a symbolic link"
    assert why in lines[0], lines[0]
    assert snapshot(outside) == out
    assert snapshot(root) == inside


def test_a_journal_from_before_signing_is_refused_not_trusted(places: tuple[Path, Path]) -> None:
    """A format-1 journal (what earlier versions wrote) could as well be planted: refused, with the
    way out in the hint; nothing written (not even the setuid mode it asks for)."""
    root, _ = places
    (root / ".hqp-journal").write_bytes(forged([journal.Entry(b"vllm/a.py", b"x\n", 0o4755)]))
    before = snapshot(root)
    with pytest.raises(TreeError, match="not signed") as err:
        Tree(root).recover_interrupted(strict=True)
    assert err.value.hint and "inspect it" in err.value.hint
    assert snapshot(root) == before


# --- a directory swapped for a link ----------------------------------------------------------------


def swap(root: Path, away: Path, outside: Path) -> None:
    """``vllm/sub`` moved out of DIR, and a link to the outside directory put in its place."""
    os.rename(root / "vllm/sub", away)
    (root / "vllm/sub").symlink_to(outside)


def on_rename(monkeypatch: pytest.MonkeyPatch, hook: Callable[[bytes], None]) -> None:
    """Call ``hook(name renamed onto)`` before every rename of the process (both spellings)."""
    for attr in ("rename", "replace"):
        real = getattr(os, attr)

        def renamed(src: Any, dst: Any, *, _real: Any = real, **kw: Any) -> None:
            hook(os.path.basename(os.fsencode(dst)))
            _real(src, dst, **kw)

        monkeypatch.setattr(os, attr, renamed)


def test_a_directory_swapped_for_a_link_during_the_write_is_refused_and_not_written_through(
    places: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Right after the first file (vllm/a.py) is renamed into place, vllm/sub is moved away and a
    link to the outside directory takes its place. The write refuses to go on; the rollback puts
    a.py back, writes nothing through the link, and names the two files it could not reach
    instead of saying nothing was changed; the journal stays, and the next run refuses it."""
    root, outside = places
    away = tmp_path / "moved-away"
    out = snapshot(outside)

    def hook(name: bytes) -> None:
        if name == b"a.py" and not away.exists():
            swap(root, away, outside)

    with monkeypatch.context() as patched:
        on_rename(patched, hook)
        with pytest.raises(TreeWriteError) as err:
            Tree(root).write(CHANGES)
    message = str(err.value)
    assert "replaced by a symlink during the write" in message
    assert "nothing was changed" not in message
    assert (
        "putting back 2 files failed: vllm/sub/b.py (a directory on the way is a symbolic link), "
        "vllm/sub/c.py (a directory on the way is a symbolic link); they may still be patched"
    ) in message
    assert snapshot(outside) == out
    assert snapshot(away) == {n: (0o100644, body(f"sub/{n}")) for n in ("b.py", "c.py")}
    assert (root / "vllm/a.py").read_bytes() == body("a.py")
    assert (root / "vllm/z.py").read_bytes() == body("z.py")
    assert debris(root) == [".hqp-journal"]
    with pytest.raises(TreeError, match="passes vllm/sub, a symbolic link; nothing was written"):
        Tree(root).recover_interrupted(strict=True)
    assert snapshot(outside) == out


def test_a_directory_swapped_for_a_link_during_the_rollback_is_not_written_through(
    places: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last rename (vllm/z.py) fails after vllm/sub's files were replaced; as the rollback
    starts, vllm/sub is swapped for a link to the outside directory. The rollback puts back what
    it reaches plainly, writes nothing outside, and names the two files left patched in the
    directory that was moved away."""
    root, outside = places
    away = tmp_path / "moved-away"
    out = snapshot(outside)

    def hook(name: bytes) -> None:
        if name == b"z.py":
            raise OSError(errno.EIO, "Input/output error")

    with monkeypatch.context() as patched:
        on_rename(patched, hook)
        real_read = journal.read

        def read(*args: Any, **kw: Any) -> Any:
            swap(root, away, outside)
            return real_read(*args, **kw)

        patched.setattr(journal, "read", read)
        with pytest.raises(TreeWriteError) as err:
            Tree(root).write(CHANGES)
    message = str(err.value)
    assert "(Input/output error: " in message and "vllm/z.py)" in message
    assert "nothing was changed" not in message
    assert (
        "putting back 2 files failed: vllm/sub/b.py (a directory on the way is a symbolic"
        in message
    )
    assert snapshot(outside) == out
    assert (away / "b.py").read_bytes() == CHANGES[b"vllm/sub/b.py"]  # patched, as reported
    assert (root / "vllm/a.py").read_bytes() == body("a.py")
    assert debris(away) == [] and debris(root) == [".hqp-journal"]


def test_a_directory_swapped_after_it_was_resolved_is_not_read_through(
    places: tuple[Path, Path], tmp_path: Path
) -> None:
    """The reads too go through the directories opened from DIR down while the lock is held: a
    path resolved inside DIR, whose directory is then swapped for a link, is refused, not read
    from the outside directory (whose bytes would become the journal's "originals")."""
    root, outside = places
    tree = Tree(root)
    with tree.locked(exclusive=False):
        assert tree.read(b"vllm/a.py") == body("a.py")
        tree.resolve(b"vllm/sub/c.py")
        swap(root, tmp_path / "away", outside)
        with pytest.raises(TreeError, match="a directory on the way is a symbolic link"):
            tree.read(b"vllm/sub/c.py")


# --- one writer per directory ------------------------------------------------------------------------


@contextlib.contextmanager
def held(root: Path, how: int = fcntl.LOCK_EX) -> Iterator[int]:
    """DIR's lock, held by this process as another run would hold it."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, how)
        yield fd
    finally:
        os.close(fd)


def test_a_second_run_waits_a_bounded_time_then_refuses_with_one_line(
    places: tuple[Path, Path], tmp_path: Path
) -> None:
    root, _ = places
    patch = tmp_path / "a.patch"
    patch.write_bytes(edit("a.py"))
    before = snapshot(root)
    with held(root):
        start = time.monotonic()
        proc = run(root, "--patch", patch, env={"HQP_LOCK_WAIT": "0.5"})
        took = time.monotonic() - start
        checked = run(root, "--patch", patch, "--check-applied", env={"HQP_LOCK_WAIT": "0.2"})
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 2 and "another run holds the lock on" in lines[0], lines
    assert "gave up after waiting 0.5 s" in lines[0] and "HQP_LOCK_WAIT" in lines[1]
    assert 0.5 <= took < 10
    assert (
        checked.returncode == 2 and "gave up after waiting 0.2 s" in checked.stderr
    )  # readers wait too
    assert snapshot(root) == before


def test_a_waiting_run_goes_on_once_the_lock_is_free_and_readers_share(
    places: tuple[Path, Path], tmp_path: Path
) -> None:
    root, _ = places
    patch = tmp_path / "a.patch"
    patch.write_bytes(edit("a.py"))
    with held(root, fcntl.LOCK_SH):  # another reader: a reader does not wait for it
        checked = run(root, "--patch", patch, "--check-applied", env={"HQP_LOCK_WAIT": "0"})
    assert checked.returncode == 1, checked.stderr  # answered: a.patch is not there yet
    with held(root) as fd:
        threading.Timer(0.5, fcntl.flock, (fd, fcntl.LOCK_UN)).start()
        start = time.monotonic()
        proc = run(root, "--patch", patch)
        took = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert took >= 0.5
    assert b"LINE 4 of a.py" in (root / "vllm/a.py").read_bytes()


def test_where_a_directory_cannot_be_locked_a_lock_file_in_it_is(
    places: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On NFS an exclusive flock needs a descriptor open for writing, which a directory's cannot
    be (EBADF): DIR/.hqp-lock is locked instead, and it excludes a second writer just the same."""
    root, _ = places
    real = fcntl.flock

    def flock(fd: int, op: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EBADF, "Bad file descriptor")
        real(fd, op)

    with monkeypatch.context() as patched:
        patched.setattr(fcntl, "flock", flock)
        assert Tree(root).write({b"vllm/a.py": b"x\n"}) == [b"vllm/a.py"]
        assert (root / ".hqp-lock").is_file()
        patched.setenv("HQP_LOCK_WAIT", "0.2")
        lock = os.open(root / ".hqp-lock", os.O_RDWR)
        try:
            real(lock, fcntl.LOCK_EX)
            with pytest.raises(TreeBusy, match=r"gave up after waiting 0\.2 s"):
                Tree(root).write({b"vllm/a.py": b"y\n"})
        finally:
            os.close(lock)
    assert (root / "vllm/a.py").read_bytes() == b"x\n"


def test_a_reader_that_cannot_make_the_lock_file_reads_unlocked_a_writer_refuses(
    places: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where DIR cannot be locked and the lock file cannot be made (a user's ``status`` of a root's
    site-packages on NFS): a reader goes on, a writer refuses, nothing written."""
    from hyperqwen_patches.sources import tree as treemod

    root, _ = places
    real = fcntl.flock

    def flock(fd: int, op: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EBADF, "Bad file descriptor")
        real(fd, op)

    def no_lock_file(_fd: int, _exclusive: bool, root: Path) -> int:
        raise TreeError(f"cannot lock {root}: Permission denied")

    before = snapshot(root)
    with monkeypatch.context() as patched:
        patched.setattr(fcntl, "flock", flock)
        patched.setattr(treemod, "_lock_file", no_lock_file)
        reader = Tree(root)
        with reader.locked(exclusive=False):
            assert reader.read(b"vllm/a.py") == body("a.py")
        with pytest.raises(TreeError, match=r"cannot lock .*Permission denied"):
            Tree(root).write({b"vllm/a.py": b"x\n"})
    assert snapshot(root) == before


ROUNDS = 12
RUNS = 8


def test_eight_applies_at_once_one_writes_and_the_others_find_it_applied(tmp_path: Path) -> None:
    """8 processes start ``apply`` on one pristine DIR together, 12 rounds: in each exactly one
    writes the whole series, the others wait for it and find every patch there (or, past the wait,
    refuse with the one line); the tree is patched whole and no journal or temporary is left."""
    pristine = tmp_path / "pristine"
    names = [f"d{d}/m{i:02d}.py" for d in range(2) for i in range(20)]
    for name in names:
        (pristine / "vllm" / name).parent.mkdir(parents=True, exist_ok=True)
        (pristine / "vllm" / name).write_bytes(body(name))
    patches = []
    for p in range(5):
        path = tmp_path / f"{p}.patch"
        path.write_bytes(b"".join(edit(n) for n in names[p * 8 : p * 8 + 8]))
        patches.append(path)
    args = [x for p in patches for x in ("--patch", str(p))]
    reference = tmp_path / "reference"
    shutil.copytree(pristine, reference)
    assert run(reference, *args).returncode == 0
    patched = snapshot(reference)
    env = {**os.environ, "HQP_LOCK_WAIT": "30"}
    for r in range(ROUNDS):
        tree = tmp_path / f"round{r}"
        shutil.copytree(pristine, tree)
        argv = [sys.executable, "-m", "hyperqwen_patches", "apply", str(tree), *args, "--json"]
        procs = [
            subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
            for _ in range(RUNS)
        ]
        outcomes = []
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            if proc.returncode == 2 and b"another run holds the lock on" in err:
                outcomes.append("refused")
                continue
            assert proc.returncode == 0, (r, err.decode())
            doc = json.loads(out)
            if doc["written"]:
                assert len(doc["written"]) == len(names), doc["written"]
                outcomes.append("wrote")
            else:
                assert doc["carried"] == len(patches), doc
                outcomes.append("found applied")
        assert outcomes.count("wrote") == 1, (r, outcomes)
        assert snapshot(tree) == patched, r
        assert debris(tree) == [], (r, debris(tree))
        shutil.rmtree(tree)


# --- modes --------------------------------------------------------------------------------------------


def test_a_patched_setuid_or_setgid_file_loses_those_bits_as_with_gnu_patch(
    places: tuple[Path, Path], tmp_path: Path
) -> None:
    root, _ = places
    (root / "vllm/a.py").chmod(0o4755)
    (root / "vllm/z.py").chmod(0o2750)
    patch = tmp_path / "p.patch"
    patch.write_bytes(edit("a.py") + edit("z.py"))
    gnu = tmp_path / "gnu"
    shutil.copytree(root, gnu, symlinks=True)
    proc = run(root, "--patch", patch)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE((root / "vllm/a.py").stat().st_mode) == 0o755
    assert stat.S_IMODE((root / "vllm/z.py").stat().st_mode) == 0o750
    if shutil.which("patch"):  # the oracle, where it is installed
        subprocess.run(["patch", "-p1", "--fuzz", "0", "-s", "-i", str(patch)], cwd=gnu, check=True)
        for name in ("a.py", "z.py"):
            assert (gnu / "vllm" / name).stat().st_mode == (root / "vllm" / name).stat().st_mode


def test_a_write_into_more_directories_than_the_descriptor_limit_allows_still_writes(
    tmp_path: Path,
) -> None:
    """One descriptor is kept per directory read or written; a soft limit of 1,024 (a common one)
    is raised to the hard one before a series touching files in 1,100 directories runs out."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip(f"the hard limit on descriptors is {hard}")
    root = tmp_path / "wide"
    changes: dict[bytes, bytes | None] = {}
    for d in range(1100):
        (root / f"vllm/d{d:04d}").mkdir(parents=True)
        (root / f"vllm/d{d:04d}/m.py").write_bytes(b"x\n")
        changes[b"vllm/d%04d/m.py" % d] = b"y\n"
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    try:
        tree = Tree(root)
        with tree.locked(exclusive=True):
            assert all(tree.read(p) == b"x\n" for p in changes)
            assert len(tree.write(changes)) == 1100
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert all((root / p.decode()).read_bytes() == b"y\n" for p in changes)


# --- faults injected into the write --------------------------------------------------------------------


@pytest.mark.parametrize("which", [1, 2], ids=["journal-file", "journal-directory"])
def test_a_failed_fsync_of_the_journal_changes_nothing(
    places: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, which: int
) -> None:
    """fsync fails (EIO) on the journal's own bytes, or on its directory after its rename: no file
    was replaced yet; the message says nothing was changed, and it is true, debris included."""
    root, _ = places
    journal.signing_key(create=True)  # made beforehand: its own fsyncs are not the ones counted
    before = snapshot(root)
    real = os.fsync
    calls = []

    def fsync(fd: int) -> None:
        calls.append(fd)
        if len(calls) == which:
            raise OSError(errno.EIO, "Input/output error")
        real(fd)

    with monkeypatch.context() as patched:
        patched.setattr(os, "fsync", fsync)
        with pytest.raises(TreeWriteError) as err:
            Tree(root).write(CHANGES)
    assert len(calls) == which
    assert "Input/output error" in str(err.value) and "nothing was changed" in str(err.value)
    assert snapshot(root) == before and debris(root) == []


def many(tmp_path: Path) -> tuple[Path, dict[bytes, bytes | None]]:
    """60 files: enough that the renames run in several threads."""
    root = tmp_path / "many"
    (root / "vllm").mkdir(parents=True)
    for i in range(60):
        (root / f"vllm/m{i:02d}.py").write_bytes(b"x = %d\n" % i)
        (root / f"vllm/m{i:02d}.py").chmod(0o640 if i % 2 else 0o4755)
    return root, {b"vllm/m%02d.py" % i: b"y = %d\n" % i for i in range(60)}


def test_a_failed_rename_among_parallel_renames_puts_every_file_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, changes = many(tmp_path)
    before = snapshot(root)

    def hook(name: bytes) -> None:
        if name == b"m41.py":
            raise OSError(errno.EIO, "Input/output error")

    with monkeypatch.context() as patched:
        on_rename(patched, hook)
        with pytest.raises(TreeWriteError) as err:
            Tree(root).write(changes)
    assert str(err.value).split(")")[0].endswith("vllm/m41.py")
    assert "nothing was changed (every file was put back)" in str(err.value)
    assert snapshot(root) == before and debris(root) == []  # setuid bits put back too


def test_a_restore_that_fails_keeps_the_journal_and_says_which_file(
    places: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write fails at vllm/z.py; putting vllm/a.py back fails too. The message names a.py as
    still patched (not "nothing was changed"), the journal is kept, and the next run finishes."""
    root, _ = places
    before = snapshot(root)
    seen: list[bytes] = []

    def hook(name: bytes) -> None:
        seen.append(name)
        if name == b"z.py" or (name == b"a.py" and seen.count(b"a.py") == 2):
            raise OSError(errno.EIO, "Input/output error")

    with monkeypatch.context() as patched:
        on_rename(patched, hook)
        with pytest.raises(TreeWriteError) as err:
            Tree(root).write(CHANGES)
    message = str(err.value)
    assert "putting back 1 files failed: vllm/a.py (Input/output error)" in message
    assert "nothing was changed" not in message
    assert (root / ".hqp-journal").exists()
    assert (root / "vllm/a.py").read_bytes() == CHANGES[b"vllm/a.py"]
    assert (root / "vllm/sub/b.py").read_bytes() == body("sub/b.py")
    done = Tree(root).recover_interrupted(strict=True)
    assert done is not None and done.restored == [b"vllm/a.py"] and not done.failed
    assert snapshot(root) == before and debris(root) == []


def test_a_cache_that_cannot_keep_the_key_is_said_before_anything_is_written(
    places: tuple[Path, Path], tmp_path: Path
) -> None:
    root, _ = places
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory\n")
    patch = tmp_path / "a.patch"
    patch.write_bytes(edit("a.py"))
    before = snapshot(root)
    proc = run(root, "--patch", patch, env={"HQP_CACHE": str(blocked)})
    assert proc.returncode == 2, proc.stderr
    assert "cannot keep the key that signs the write journal" in proc.stderr
    assert "HQP_CACHE" in proc.stderr
    assert snapshot(root) == before

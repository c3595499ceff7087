"""The one flock helper (``flocks.py``) that DIR's lock, a cache entry's lock and the fork's row-command
lock share since three copies were made one: each caller keeps its own way of meeting a held lock
(refuse at once, wait a bounded time, wait as long as it takes while saying so). Real locks: a second
open file description conflicts with the first as another process's would."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperqwen_patches import flocks
from hyperqwen_patches.cachedir import entry_lock, entry_lock_if_free


class Busy(Exception):
    pass


@contextlib.contextmanager
def held_elsewhere(path: Path, *, shared: bool = False) -> Iterator[int]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def test_a_free_lock_is_taken_and_released_on_exit(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    with flocks.exclusive(lock, wait=0, busy=Busy):
        second = flocks.exclusive(lock, wait=0, busy=Busy)
        with pytest.raises(Busy), second:
            pass
    with flocks.exclusive(lock, wait=0, busy=Busy):  # free again
        pass
    assert lock.is_file()  # left in place: removing it would race the next run


def test_wait_zero_refuses_at_once_with_the_callers_message(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    with held_elsewhere(lock):
        started = time.monotonic()
        mine = flocks.exclusive(lock, wait=0, busy=lambda: Busy(f"{lock} is held"))
        with pytest.raises(Busy, match=r"x\.lock is held"), mine:
            pass
        assert time.monotonic() - started < 0.5


def test_a_bounded_wait_gives_up_after_it_and_takes_a_lock_freed_before(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    with held_elsewhere(lock):
        started = time.monotonic()
        with pytest.raises(Busy), flocks.exclusive(lock, wait=0.3, busy=Busy):
            pass
        assert 0.3 <= time.monotonic() - started < 2
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    threading.Timer(0.2, os.close, (fd,)).start()  # freed within the wait
    with flocks.exclusive(lock, wait=5, busy=Busy):
        pass


def test_a_shared_lock_waits_only_for_an_exclusive_one(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        with held_elsewhere(lock, shared=True):
            flocks.take(fd, shared=True, wait=0, busy=Busy)  # readers share
        with held_elsewhere(lock, shared=True), pytest.raises(Busy):
            fd2 = os.open(lock, os.O_RDWR)
            try:
                flocks.take(fd2, wait=0, busy=Busy)  # a writer does not
            finally:
                os.close(fd2)
    finally:
        os.close(fd)


def test_an_unbounded_wait_says_it_waits_only_when_it_does(tmp_path: Path) -> None:
    said: list[str] = []

    @contextlib.contextmanager
    def waiting() -> Iterator[None]:
        said.append("waiting")
        yield

    with entry_lock(tmp_path, "entry", waiting=waiting):
        pass
    assert said == []  # free: nothing to say
    fd = os.open(tmp_path / "locks" / "entry.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    threading.Timer(0.2, os.close, (fd,)).start()
    with entry_lock(tmp_path, "entry", waiting=waiting):
        pass
    assert said == ["waiting"]


def test_the_cache_entry_lock_is_the_one_prune_tests(tmp_path: Path) -> None:
    """The PyPI cache's fetch lock and ``cache --prune``'s probe are one file: prune skips an entry
    while a fetch holds it."""
    with (
        entry_lock(tmp_path, "vllm-0.29.0-wheel"),
        entry_lock_if_free(tmp_path, "vllm-0.29.0-wheel") as free,
    ):
        assert not free
    with entry_lock_if_free(tmp_path, "vllm-0.29.0-wheel") as free:
        assert free

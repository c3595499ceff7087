"""What every check shares: a :class:`Finding` and the :class:`CheckContext` whose expensive parts
(the manifest, each row's patch, the pristine tree, the applied series) are computed once, on first use.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar

from hyperqwen_patches.errors import HqpError
from hyperqwen_patches.records import field, record
from hyperqwen_patches.series.manifestmodel import Manifest

if TYPE_CHECKING:
    from hyperqwen_patches.engine.applying import SeriesResult
    from hyperqwen_patches.series.rows import SeriesRow
    from hyperqwen_patches.sources.pristinetree import PristineTree, Progress


# "note" is information a reviewer should see (e.g. the knob registry count); it never fails a check.
# "unverified": the check could not look (no fork given, no source for a release); it is never
# counted as holding, and ``check --require-fork`` fails on the fork checks' ones.
Severity = Literal["error", "warning", "problem", "note", "unverified"]
# Directories whose patch files (and module files under files/) must all be rows (invariant 2).
CARRIED_DIRS = ("patches", "kvarn")
PATCH_SUFFIXES = (".patch", ".diff")


@record(frozen=True)
class Finding:
    """One thing a check found: which check, how bad, about what, and the details."""

    check: str
    severity: Severity
    subject: str
    message: str
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        return {
            "check": self.check,
            "severity": self.severity,
            "subject": self.subject,
            "message": self.message,
            "detail": self.detail,
        }


T = TypeVar("T")


# The instance-dict key of a context's failed properties (name -> the typed error they raised).
_FAILED = "_once_failed"


class _once(Generic[T]):
    """A cached property computed once even when two threads ask at the same time.

    functools.cached_property has no lock from Python 3.12 on; run_check reads the context from two
    threads. The value lands in the instance dict under the property's name, so ``peek`` sees it and
    later reads never take the lock.
    """

    def __init__(self, func: Callable[[Any], T]) -> None:
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> T:
        if obj is None:
            return self  # type: ignore[return-value]
        cache = obj.__dict__
        if self.name not in cache:
            # One re-entrant lock per context: `applied` needs `series` and `pristine`.
            with obj._lock:
                # A typed failure (the release cannot be downloaded) is the same for every check that
                # asks: computed once and raised again, not tried once per check (7 downloads offline).
                failed: dict[str, HqpError] = cache.setdefault(_FAILED, {})
                if self.name not in cache and self.name not in failed:
                    try:
                        cache[self.name] = self.func(obj)
                    except HqpError as exc:
                        failed[self.name] = exc
                if self.name in failed:
                    raise failed[self.name]
        return cache[self.name]  # type: ignore[no-any-return]


class Slot(Generic[T]):
    """Shared work that a later stage's checks keep in the context, declared by the module that owns
    it (where its type lives: this stage may not import the later ones): ``ctx.shared(SLOT)``
    computes it once per run, on first use, and hands every later caller the same value.

    A slot is computed without the context's lock, so that opening a fork runs alongside the other
    thread's checks: the checks that share one run on one thread (the fork checks on run_check's
    worker, the static checks on the calling thread). A typed error is not kept: the next caller
    tries again and meets it too."""

    def __init__(self, name: str, make: Callable[[CheckContext], T]) -> None:
        self.name = name
        self.make = make

    def __repr__(self) -> str:
        return f"Slot({self.name!r})"


class Closable(Protocol):
    def close(self) -> None: ...


@record
class CheckContext:
    """What the checks share; every expensive part is computed once, on first use."""

    root: Path
    manifest: Manifest
    source: str
    max_offset: int | None = None
    progress: Progress | None = None
    fork: str | None = None  # --fork PATH|URL|BUNDLE (default: patches/fork.bundle when present)
    export_point: str | None = None  # --export-point NAME (default: every export point)
    # What the checks were checked against, for the reviewer (the fork, its tips, the base commit):
    # a check that opens one of them records it here (check prints and returns it).
    evidence: dict[str, Any] = field(default_factory=dict)
    _opened: list[Closable] = field(default_factory=list)  # closed with the context
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)
    _slots: dict[Slot[Any], Any] = field(default_factory=dict, repr=False, compare=False)

    @_once
    def series(self) -> list[SeriesRow]:
        """Every row (skipped ones included) with its engine patch or the error building it."""
        from hyperqwen_patches.series.rows import load_series

        return load_series(self.manifest, include_skipped=True)

    @_once
    def pristine(self) -> PristineTree:
        from hyperqwen_patches.sources.pristine import open_pristine

        tree = open_pristine(
            self.source,
            package=self.manifest.package,
            version=self.manifest.pin,
            progress=self.progress,
        )
        self.closes(tree)
        return tree

    @_once
    def applied(self) -> SeriesResult:
        """The applied rows, in order, onto the pristine tree, in memory (engine policies on)."""
        from hyperqwen_patches.engine.applying import Policy, apply_series

        patches = [s.patch for s in self.series if s.patch is not None and s.row.skip is None]
        policy = Policy(max_offset=self.max_offset, exact=False, ambiguity="error", forward=True)
        return apply_series(patches, self.pristine.read, policy)

    def peek(self, name: str) -> Any:
        """A cached property's value if a check computed it, else None; never computes it."""
        return self.__dict__.get(name)

    def shared(self, slot: Slot[T]) -> T:
        """The slot's value, computed on the first call (its type is the slot's)."""
        if slot not in self._slots:
            self._slots[slot] = slot.make(self)
        return self._slots[slot]  # type: ignore[no-any-return]

    def closes(self, thing: Closable) -> None:
        """Close ``thing`` (a release, a fork session) with the context."""
        self._opened.append(thing)

    def close(self) -> None:
        for thing in self._opened:
            thing.close()


CheckFunction = Callable[[CheckContext], list[Finding]]

"""What the release plus the first k rows of a series gives, file by file, and where a tree differs.

Unapplying the series in memory (``verify_applied``) says which rows' hunks a tree carries, but not
that it carries nothing else: a row dropped from the series, an earlier revision of a row, or a hand
edit outside every hunk's context all leave the later rows' hunks in place. So the answer is checked
against the release itself: the series is applied to the pristine files one row at a time, and the
digest of every file the series touches is kept after each row (``expected_states``). A tree that
carries rows 1..k must hold exactly those bytes in every touched file (``divergences``); a file that
holds something else "carries an earlier or foreign change".

Pure: the pristine files come through a reader, nothing is written; the result is JSON-shaped so that
the caller can cache it (``series/expected.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from hyperqwen_patches.engine.applying import Policy, Reader, apply_series
from hyperqwen_patches.engine.patchmodel import Patch
from hyperqwen_patches.records import record
from hyperqwen_patches.resultcache import sha256  # CPython's own: hashlib's import loads OpenSSL

TYPE_CHECKING = False  # not typing's: apply's import path stays light
if TYPE_CHECKING:
    from typing import Any

VERSION = "1"  # bump when what is computed changes (the cache key includes it)


def digest(data: bytes | None) -> str | None:
    """The sha256 of a file's bytes; None for a file that is not there."""
    return None if data is None else sha256(data).hexdigest()


@record(frozen=True, slots=True)
class Expected:
    """Each touched file's digest after rows 0..n of the series, as the points where it changes.

    ``files[path]`` is ``[[k, digest], ...]``, ascending k, starting with k = 0 (the release): after
    k rows the file's digest is that of the last entry at or before k. ``touched_by[path]`` lists the
    0-based rows that change it. ``known`` is how many rows applied to the release (a row that did not
    apply leaves later states unknown: ``divergences`` then says nothing for them).
    """

    rows: list[str]
    files: dict[str, list[list[int | str | None]]]
    touched_by: dict[str, list[int]]
    known: int

    def to_json(self) -> dict[str, object]:
        return {
            "rows": self.rows,
            "files": self.files,
            "touched_by": self.touched_by,
            "known": self.known,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Expected:
        return cls(value["rows"], value["files"], value["touched_by"], value["known"])

    def digest_after(self, path: str, k: int) -> str | None:
        found: str | None = None
        for at, value in self.files[path]:
            if at > k:  # type: ignore[operator]
                break
            found = value  # type: ignore[assignment]
        return found


def path_key(path: bytes) -> str:
    """A path as a JSON key that maps back to the same bytes (undecodable bytes as surrogates)."""
    return path.decode("utf-8", "surrogateescape")


def expected_states(patches: Sequence[Patch], read_pristine: Reader, policy: Policy) -> Expected:
    """Apply ``patches`` to the release one row at a time, keeping each touched file's digest."""
    state: dict[bytes, bytes | None] = {}

    def read(path: bytes) -> bytes | None:
        return state[path] if path in state else read_pristine(path)

    files: dict[str, list[list[int | str | None]]] = {}
    touched_by: dict[str, list[int]] = {}
    # Rows apply on top of each other exactly as ``apply`` applies them (no --forward: a row that
    # finds its change already there is not a state the series leaves).
    strict = Policy(
        max_offset=policy.max_offset, exact=policy.exact, ambiguity="off", forward=False
    )
    known = 0
    for i, patch in enumerate(patches):
        result = apply_series([patch], read, strict)
        if not result.ok:
            break
        for path, data in result.changes.items():
            key = path_key(path)
            if key not in files:
                files[key] = [[0, digest(read_pristine(path))]]
            files[key].append([i + 1, digest(data)])
            touched_by.setdefault(key, []).append(i)
            state[path] = data
        known = i + 1
    return Expected([p.name for p in patches], files, touched_by, known)


@record(frozen=True, slots=True)
class Divergence:
    """A touched file whose bytes are neither what rows 1..k give nor anything this run can name."""

    path: str
    rows: list[str]  # the rows of the series that touch it


def divergences(expected: Expected, carried: int, read: Reader) -> list[Divergence] | None:
    """The touched files whose bytes differ from the release plus rows 1..``carried``, in path order;
    None when that state is unknown (a row up to ``carried`` did not apply to the release)."""
    if carried > expected.known:
        return None
    out: list[Divergence] = []
    for key in sorted(expected.files):
        want = expected.digest_after(key, carried)
        have = digest(read(key.encode("utf-8", "surrogateescape")))
        if have != want:
            rows = [expected.rows[i] for i in expected.touched_by.get(key, [])]
            out.append(Divergence(key, rows))
    return out


def describe(found: Sequence[Divergence], limit: int = 6) -> str:
    """One clause per file: "vllm/x.py carries an earlier or foreign change (touched by a, b)"."""
    parts = [
        f"{d.path} carries an earlier or foreign change (touched by {', '.join(d.rows)})"
        for d in found[:limit]
    ]
    if len(found) > limit:
        parts.append(f"and {len(found) - limit} more files")
    return "; ".join(parts)

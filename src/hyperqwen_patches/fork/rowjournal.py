"""One row command's change, written so that a kill at any point is undone by the next row command.

A row command (``refresh``, ``drop``, ``move``, ``rename``) changes three places that no single
rename covers: the fork's branch, the repository's files (patch files, manifest, series, PATCHES.md,
the bundle) and the open edit's state. Before the first of them changes, the journal
(``hqp-rowop.json`` in the fork's git directory, written through a temporary file and a rename)
records what each was; it is removed once all three are written. A journal found at the start of
the next row command means the last one was cut short: every file it names gets its old bytes back,
the branch its old tip and the edit its old state, so the series and the fork are as they were
(never between). The command that was cut short can then simply be run again.

One row command at a time per fork: :func:`locked` holds an exclusive ``flock`` on
``hqp-rows.lock`` for the whole command, so two ``edit``s (or an ``edit`` and a ``refresh``) of one
fork never interleave.
"""

from __future__ import annotations

import base64
import json
import os
import signal
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from hyperqwen_patches import flocks, gitrun
from hyperqwen_patches.atomicfile import write_atomic
from hyperqwen_patches.errors import UsageError

JOURNAL = "hqp-rowop.json"
LOCK = "hqp-rows.lock"
EDIT_STATE = "hqp-edit.json"  # rowedit's state file (named here: the journal restores it)
KILL_ENV = "HQP_TEST_KILL_AT"  # tests: SIGKILL this process when the named step is reached


def step(name: str) -> None:
    """A point a kill test can stop the command at (``HQP_TEST_KILL_AT=name``)."""
    if os.environ.get(KILL_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


@contextmanager
def locked(git_dir: Path) -> Iterator[None]:
    """Hold the fork's row-command lock; a second command refuses at once with one line."""

    def busy() -> UsageError:
        return UsageError(
            f"another row command (edit, refresh, new, drop, move, rename) is running on "
            f"{git_dir}; wait for it to finish"
        )

    with flocks.exclusive(git_dir / LOCK, wait=0, busy=busy):
        yield


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def begin(
    git_dir: Path,
    *,
    op: str,
    root: Path,
    files: Mapping[str, bytes | None],
    branch: str,
    old_tip: str,
) -> None:
    """Record the old state of everything the command is about to change (``files``: repository
    path -> bytes before, None for a file that did not exist)."""
    try:
        edit = (git_dir / EDIT_STATE).read_bytes()
    except FileNotFoundError:
        edit = None
    doc = {
        "op": op,
        "root": str(root),
        "branch": branch,
        "old_tip": old_tip,
        "edit_state": _b64(edit),
        "files": {path: _b64(data) for path, data in sorted(files.items())},
    }
    write_atomic(git_dir / JOURNAL, json.dumps(doc, indent=1).encode() + b"\n")


def end(git_dir: Path) -> None:
    """Everything is written: the change stands."""
    (git_dir / JOURNAL).unlink(missing_ok=True)


def recover(git_dir: Path) -> str | None:
    """Undo a row command that was cut short, if any; what was undone, in a line, or None."""
    path = git_dir / JOURNAL
    try:
        doc = json.loads(path.read_bytes())
        root = Path(doc["root"])
        files = {str(k): v for k, v in doc["files"].items()}
        branch, old_tip, edit = str(doc["branch"]), str(doc["old_tip"]), doc["edit_state"]
        op = str(doc["op"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(
            f"{path}: an unreadable journal of an interrupted row command ({exc})",
            hint=f"check the fork's branch and the series by hand, then remove {path}",
        ) from None
    # Every path checked before the first is written: a journal naming a file outside the
    # repository (forged, or damaged) is refused whole, with nothing restored.
    for rel in files:
        if Path(rel).is_absolute() or ".." in Path(rel).parts or not rel:
            raise UsageError(
                f"{path}: names {rel!r}, which is not inside {root}; nothing was restored",
                hint=f"check the fork's branch and the series by hand, then remove {path}",
            )
    for rel, data in files.items():
        target = root / rel
        if data is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(target, base64.b64decode(data))
    gitrun.check(
        ["update-ref", "-m", f"hyperqwen-patches: undo an interrupted {op}",
         f"refs/heads/{branch}", old_tip],
        git_dir=git_dir,
        what=f"moving {branch} back",
    )  # fmt: skip
    state = git_dir / EDIT_STATE
    if edit is None:
        state.unlink(missing_ok=True)
    else:
        write_atomic(state, base64.b64decode(edit))
    path.unlink()
    return f"an interrupted {op} was undone: {branch} is back at {old_tip[:12]}, {len(files)} file(s) restored"

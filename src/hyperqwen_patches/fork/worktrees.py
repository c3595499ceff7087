"""Git commands run in a linked worktree of a fork, as that worktree: its own git dir (``<fork git
dir>/worktrees/<name>``), index and HEAD, so the fork's own checkout, index and branches are never
touched. ``edit``/``refresh`` and a paused ``port --rebase`` both work this way."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

from hyperqwen_patches import gitrun
from hyperqwen_patches.errors import GitError


def admin_dir(worktree: Path) -> Path:
    """A linked worktree's own git dir, from its ``.git`` file."""
    dotgit = worktree / ".git"
    try:
        text = dotgit.read_text()
    except OSError as exc:
        raise GitError(f"{worktree}: not a linked worktree ({exc})") from exc
    if not text.startswith("gitdir: "):
        raise GitError(f"{dotgit} does not name a git directory")
    admin = Path(text[len("gitdir: ") :].strip())
    return admin if admin.is_absolute() else (worktree / admin).resolve()


def run_in(
    worktree: Path,
    args: Sequence[str],
    *,
    what: str,
    index: Path | None = None,
    input: bytes | None = None,
) -> bytes:
    """``git ARGS`` in ``worktree``, as that worktree (its own index unless ``index`` names
    another); GitError naming ``what`` on failure."""
    admin = admin_dir(worktree)
    return gitrun.check(
        args,
        git_dir=admin,
        cwd=worktree,
        index=index if index is not None else admin / "index",
        env={"GIT_WORK_TREE": str(worktree)},
        input=input,
        config=filters_off(admin),
        what=what,
    )


def filters_off(git_dir: Path) -> tuple[tuple[str, str], ...]:
    """``-c`` pins that switch off every filter driver the repository's config defines.

    A fork's own ``filter.NAME.clean``/``smudge``/``process`` would otherwise run in a work tree
    the tool checks out or stages (edit, refresh, the rebase's pause), and a clean filter's output
    would become the row. Hooks are off already (``gitrun.PINNED_CONFIG``). An empty command is
    git's "no filter"; ``required=false`` keeps a required driver from failing the command.

    Asked of git once per process and repository while its config files stay as they were (a
    rebase's continue runs six commands in the worktree: six ``git config`` processes otherwise).
    """
    seen = _config_stamp(git_dir)
    kept = _FILTER_PINS.get(git_dir)
    if kept is not None and kept[0] == seen:
        return kept[1]
    pins = _filter_pins(git_dir)
    _FILTER_PINS[git_dir] = (seen, pins)
    return pins


_FILTER_PINS: dict[Path, tuple[tuple[object, ...], tuple[tuple[str, str], ...]]] = {}


def _config_stamp(git_dir: Path) -> tuple[object, ...]:
    """What would show a change of the repository's own config: each config file's stat (the
    linked worktree's, the common one); the user's and system config are read by git as always,
    but a process does not outlive an edit of them that matters here."""
    common = git_dir
    with contextlib.suppress(OSError):  # not a linked worktree: its own config is the common one
        common = (git_dir / (git_dir / "commondir").read_text().strip()).resolve()
    stamp: list[object] = []
    for path in (git_dir / "config", git_dir / "config.worktree", common / "config"):
        try:
            st = path.stat()
            stamp.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            stamp.append(None)
    return tuple(stamp)


def _filter_pins(git_dir: Path) -> tuple[tuple[str, str], ...]:
    listed = gitrun.run(["config", "--get-regexp", r"^filter\."], git_dir=git_dir)
    names = set()
    for line in listed.stdout.decode("utf-8", "surrogateescape").splitlines():
        key = line.split(" ", 1)[0]
        name, _, _var = key[len("filter.") :].rpartition(".")
        if name:
            names.add(name)
    pins: list[tuple[str, str]] = []
    for name in sorted(names):
        pins += [(f"filter.{name}.{var}", "") for var in ("clean", "smudge", "process")]
        pins.append((f"filter.{name}.required", "false"))
    return tuple(pins)


# Bytecode a test run left in a work tree is never part of a row (module rows skip it too).
_SKIPPED_PARTS = ("__pycache__",)
_SKIPPED_SUFFIXES = (b".pyc", b".pyo")


def snapshot_tree(worktree: Path, start: str) -> str:
    """The tree of ``worktree``'s files as they are on disk, byte for byte, written into the fork.

    Read into a temporary index that starts from ``start`` (the row's commit), never the work tree's
    own index, so a refresh that stops leaves what the user staged (or did not) as it was. Blobs are
    hashed with ``--no-filters``: the fork's own ``filter.*``/``text``/``ident`` settings (a clean
    filter in its config and info/attributes) must not change what becomes the row.
    """
    import os

    admin = admin_dir(worktree)
    index = admin / "index.hqp-refresh"
    index.unlink(missing_ok=True)
    try:
        run_in(worktree, ["read-tree", start], index=index, what="reading the row")
        listed = run_in(
            worktree,
            ["ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            index=index,
            what="listing the work tree",
        )
        paths = sorted({p for p in listed.split(b"\0") if p})
        entries: list[bytes] = []
        regular: list[tuple[bytes, bytes]] = []  # (path, mode)
        for rel in paths:
            full = os.path.join(os.fsencode(worktree), rel)
            parts = rel.split(b"/")
            skipped = any(p.decode(errors="replace") in _SKIPPED_PARTS for p in parts)
            try:
                st = os.lstat(full)
            except FileNotFoundError:
                st = None
            if st is None or skipped or rel.endswith(_SKIPPED_SUFFIXES):
                entries.append(b"0 " + b"0" * 40 + b"\t" + rel)  # mode 0: out of the index
            elif os.path.islink(full):
                sha = run_in(
                    worktree, ["hash-object", "-w", "--stdin"], input=os.readlink(full),
                    index=index, what="reading a link",
                ).strip()  # fmt: skip
                entries.append(b"120000 " + sha + b"\t" + rel)
            elif os.path.isfile(full):
                regular.append((rel, b"100755" if st.st_mode & 0o100 else b"100644"))
        if regular:
            shas = run_in(
                worktree,
                ["hash-object", "-w", "--no-filters", "--stdin-paths"],
                input=b"".join(rel + b"\n" for rel, _ in regular),
                index=index,
                what="reading the work tree",
            ).split()
            for (rel, mode), sha in zip(regular, shas, strict=True):
                entries.append(mode + b" " + sha + b"\t" + rel)
        if entries:
            run_in(
                worktree,
                ["update-index", "-z", "--index-info"],
                input=b"".join(e + b"\0" for e in entries),
                index=index,
                what="reading the work tree",
            )
        return (
            run_in(worktree, ["write-tree"], index=index, what="reading the work tree")
            .decode()
            .strip()
        )
    finally:
        index.unlink(missing_ok=True)


def checkout_bytes(worktree: Path, commit: str) -> None:
    """``commit``'s files written into an empty ``worktree`` byte for byte as stored, then its
    index and HEAD set to it.

    Not ``git checkout``: that runs the fork's attributes on the way out (``text``/``eol``,
    ``ident``, ``working-tree-encoding``, a filter), and :func:`snapshot_tree` reads the files back
    with none of them, so a converted file would come back as a change of every line."""
    import os

    from hyperqwen_patches.fork import reading as forkgit

    admin = admin_dir(worktree)
    listing = forkgit.ls_tree(admin, commit)
    blobs = forkgit.read_objects(
        admin, sorted({sha for mode, sha in listing.values() if mode != "160000"}), kind="blob"
    )
    root = os.fsencode(worktree)
    for path, (mode, sha) in sorted(listing.items()):
        # A crafted tree could name a path out of the work tree or into its .git: refused.
        if path.startswith(b"/") or {b"", b".", b"..", b".git"} & set(path.lower().split(b"/")):
            raise GitError(f"{commit[:12]}: the tree names {path!r}, which is not a work tree path")
        target = os.path.join(root, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if mode == "160000":  # a submodule: an empty directory, as git leaves it
            os.makedirs(target, exist_ok=True)
        elif mode == "120000":
            os.symlink(blobs[sha], target)
        else:
            with open(target, "wb") as fh:
                fh.write(blobs[sha])
            os.chmod(target, 0o755 if mode == "100755" else 0o644)
    run_in(worktree, ["read-tree", commit], what="reading the row into the work tree's index")
    run_in(
        worktree, ["update-ref", "--no-deref", "HEAD", commit], what="setting the work tree's HEAD"
    )

"""Manifest rows → engine ``Patch`` objects, in apply order.

A patch row's file is parsed with the engine's ``parse_patch`` (``-p1``); a module-file row's directory
(such as ``kvarn/files/``, which mirrors the tree: ``kvarn/files/vllm/...`` → ``vllm/...``) becomes a
creation patch with ``patch_from_files``. Paths come out relative to the directory that holds the
package, whatever the manifest's path convention: with ``paths: package`` they are prefixed with
``vllm/`` here, so the engine and every operation see one convention.
"""

from __future__ import annotations

import os
from pathlib import Path

from hyperqwen_patches import records
from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.inputfile import read_repo_file
from hyperqwen_patches.records import record
from hyperqwen_patches.series.manifest import load_manifest
from hyperqwen_patches.series.manifestmodel import Manifest, Row

TYPE_CHECKING = False  # not typing's: a plain run never imports typing (a few ms of every start)
if TYPE_CHECKING:
    from hyperqwen_patches.engine.patchmodel import FilePatch, Patch


# Build debris that is never part of a module row (Python writes it beside the sources).
IGNORED_DIRS = frozenset({b"__pycache__"})
IGNORED_SUFFIXES = (b".pyc", b".pyo")


class RowError(UsageError):
    """A row's file cannot be read or parsed."""

    def __init__(self, row: Row, message: str, *, hint: str | None = None) -> None:
        super().__init__(f"row {row.name} ({row.source_path}): {message}", hint=hint)
        self.row = row


@record(frozen=True)
class SeriesRow:
    """One row with its engine patch, or the error that kept it from being built."""

    row: Row
    patch: Patch | None
    error: str | None = None


def module_files(root: Path, row: Row, package: str, paths: str) -> dict[bytes, bytes]:
    """The files of a module row: tree path (``b"vllm/..."``) → bytes."""
    assert row.files is not None
    base = root / row.files
    if not base.is_dir():
        what = "is not a directory" if base.exists() else "does not exist"
        raise RowError(row, f"the module directory {row.files} {what}")
    inside_repository(root, base, row)
    top = os.fsencode(base)
    out: dict[bytes, bytes] = {}
    prefix = package.encode() + b"/"
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_DIRS)
        for name in dirnames:  # os.walk would skip a linked directory without a word
            if os.path.islink(os.path.join(dirpath, name)):
                shown = os.path.relpath(os.path.join(dirpath, name), top).decode(errors="replace")
                raise RowError(
                    row, f"{shown} is a symbolic link; module directories must be plain directories"
                )
        for name in sorted(filenames):
            if name.endswith(IGNORED_SUFFIXES):
                continue
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, top).replace(os.sep.encode(), b"/")
            if os.path.islink(full):
                raise RowError(
                    row, f"{os.fsdecode(rel)} is a symbolic link; module files must be plain files"
                )
            tree_path = prefix + rel if paths == "package" else rel
            if not tree_path.startswith(prefix):
                raise RowError(
                    row,
                    f"{os.fsdecode(rel)} is not under {package}/: a module directory mirrors the tree "
                    f"(e.g. {row.files}/{package}/...)",
                )
            try:  # a FIFO here would wait forever for a writer, a device never end
                out[tree_path] = read_repo_file(
                    Path(os.fsdecode(full)), "module file", shown=os.fsdecode(rel)
                )
            except (ValueError, FileNotFoundError) as exc:
                raise RowError(row, str(exc)) from None
    if not out:
        raise RowError(row, f"the module directory {row.files} holds no files")
    return out


def _prefixed(fp: FilePatch, prefix: bytes) -> FilePatch:
    return records.replace(
        fp,
        old_path=None if fp.old_path is None else prefix + fp.old_path,
        new_path=None if fp.new_path is None else prefix + fp.new_path,
    )


def inside_repository(root: Path, path: Path, row: Row) -> None:
    """A row's file or directory must be the repository's own: one reached through a symbolic link
    to elsewhere would make a check read (and print) files the series does not carry."""
    # The manifest refuses ".." and absolute paths, so only a link on the way can lead out: look
    # at the row's own components (a full resolve of every row cost 26 ms at 400 rows).
    rel = path.relative_to(root)
    step = root
    for part in rel.parts:
        step = step / part
        if step.is_symlink():
            break
    else:
        return
    real = path.resolve()
    if not real.is_relative_to(root.resolve()):
        raise RowError(
            row,
            f"{path.relative_to(root)} resolves to {real}, outside the repository "
            "(a symbolic link); rows must point at files the repository holds",
        )


def build_patch(manifest: Manifest, row: Row) -> Patch:
    """The engine patch of one row; raises :class:`RowError` or the engine's ``PatchParseError``."""
    from hyperqwen_patches.engine.patchscan import parse_patch, patch_from_files

    if row.is_module:
        return patch_from_files(
            row.name, module_files(manifest.root, row, manifest.package, manifest.paths)
        )
    assert row.patch is not None
    inside_repository(manifest.root, manifest.root / row.patch, row)
    try:
        data = read_repo_file(manifest.root / row.patch, "the patch file", shown=row.patch)
    except FileNotFoundError:
        raise RowError(row, f"the patch file {row.patch} does not exist") from None
    except ValueError as exc:  # a directory, a FIFO, a device, too large
        raise RowError(row, str(exc)) from None
    patch = parse_patch(data, name=row.name, strip=1)
    if manifest.paths == "package":
        prefix = manifest.package.encode() + b"/"
        patch = records.replace(patch, files=tuple(_prefixed(f, prefix) for f in patch.files))
    return patch


def load_series(manifest: Manifest, *, include_skipped: bool = False) -> list[SeriesRow]:
    """Every row (skipped rows only when asked) with its patch or its error; never raises for a row."""
    from hyperqwen_patches.errors import HqpError

    out: list[SeriesRow] = []
    for row in manifest.rows:
        if row.skip is not None and not include_skipped:
            continue
        try:
            out.append(SeriesRow(row, build_patch(manifest, row)))
        except RowError as exc:
            out.append(SeriesRow(row, None, exc.message))
        except HqpError as exc:  # the engine's PatchParseError: it names the row, we add the file
            message = exc.message.removeprefix(f"{row.name}: ")
            out.append(SeriesRow(row, None, f"row {row.name} ({row.source_path}): {message}"))
    return out


def series_patches(manifest: Manifest) -> list[Patch]:
    """The applied rows' patches in order; raises one :class:`UsageError` naming every bad row."""
    rows = load_series(manifest)
    bad = [r for r in rows if r.patch is None]
    if bad:
        lines = [f"{len(bad)} row(s) of {manifest.path} cannot be built:"]
        lines += [f"  {r.error}" for r in bad]
        raise UsageError("\n".join(lines))
    return [r.patch for r in rows if r.patch is not None]


def default_series(repo_root: Path) -> list[Patch]:
    """The shipped series of a repository: what ``apply`` uses when no series is given."""
    return series_patches(load_manifest(repo_root))

"""The copy index kept between runs (port/copyindexcache.py): read back, it answers as the one
built in the process; a damaged, foreign or stale entry is rebuilt; only releases that cannot change
under their name are kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperqwen_patches.port import copyindexcache
from hyperqwen_patches.port.stalecopy import DISTINCT_CHARS, CopyIndex, LineIndex, line_key
from hyperqwen_patches.sources import basecommit


def release(top: Path, files: int) -> Path:
    for i in range(files):
        path = top / "vllm" / f"d{i % 11}" / f"m{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "".join(
                f"    value_{i % 7}_{j} = compute_{(i * j) % 13}(x)\n" for j in range(i % 9 + 1)
            )
        )
    return top


def read_of(top: Path):
    return lambda p: (top / p.decode()).read_bytes()


def paths_of(top: Path) -> list[bytes]:
    return sorted(str(p.relative_to(top)).encode() for p in top.rglob("*.py"))


def test_a_kept_index_answers_as_a_built_one(tmp_path: Path) -> None:
    top = release(tmp_path / "rel", 40)
    paths = paths_of(top)
    built = LineIndex.build(read_of(top), paths)
    back = LineIndex.from_bytes(built.to_bytes(paths), paths)
    assert back is not None
    keys = {line_key(line.strip()) for p in paths for line in read_of(top)(p).splitlines()}
    for key in sorted(keys)[:500]:
        assert list(back.files_with(key)) == list(built.files_with(key))
    assert not back.files_with(123456789)
    # For another module list, or damaged, it is no index at all.
    assert LineIndex.from_bytes(built.to_bytes(paths), paths[:-1]) is None
    assert LineIndex.from_bytes(built.to_bytes(paths)[:-3], paths) is None
    assert LineIndex.from_bytes(b"something else", paths) is None


def test_the_index_names_exactly_the_files_holding_each_distinctive_line(tmp_path: Path) -> None:
    """Held to the definition, computed the slow way: a key's files are those with a stripped line
    of DISTINCT_CHARS or more whose CRC-32 is the key, in file order, each once."""
    top = release(tmp_path / "rel", 60)
    paths = paths_of(top)
    built = LineIndex.build(read_of(top), paths)
    expected: dict[int, list[int]] = {}
    for i, path in enumerate(paths):
        for line in read_of(top)(path).splitlines():
            s = line.strip()
            if len(s) >= DISTINCT_CHARS and i not in expected.setdefault(line_key(s), []):
                expected[line_key(s)].append(i)
    assert len(expected) > 100
    for key, files in expected.items():
        assert list(built.files_with(key)) == files
    short = line_key(b"x = 1")
    assert short not in expected and not built.files_with(short)


def test_the_index_is_kept_for_a_large_tree_and_used_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HQP_CACHE", str(tmp_path / "cache"))
    # ctime cannot be set back: the tree counts as unpacked long ago by making "recent" mean nothing.
    monkeypatch.setattr(basecommit, "RACY_SECONDS", 0.0)
    top = release(tmp_path / "rel", basecommit.DIR_MIN_FILES + 10)
    store = copyindexcache.store_for(f"dir:{top}", "vllm")
    assert store is not None
    paths = paths_of(top)
    first = CopyIndex(read_of(top), paths, store)
    line = b"value_1_0 = compute_0(x)"
    assert len(line) >= DISTINCT_CHARS
    texts = [line, b"value_1_1 = compute_1(x)", b"value_1_2 = compute_2(x)"]
    expected = first.candidate_files(texts)
    assert store.path.is_file()

    def no_reads(path: bytes) -> bytes:
        raise AssertionError(f"{path!r} read: the kept index was not used")

    again = CopyIndex(no_reads, paths, copyindexcache.store_for(f"dir:{top}", "vllm"))
    assert again.candidate_files(texts) == expected
    # A file changed: another key, so the index is built again from the files.
    (top / "vllm/d0/m0.py").write_text("changed = True\n")
    monkeypatch.setattr(basecommit, "RACY_SECONDS", 3600.0)
    assert copyindexcache.store_for(f"dir:{top}", "vllm") is None  # just written: not kept yet
    monkeypatch.setattr(basecommit, "RACY_SECONDS", 0.0)
    moved = copyindexcache.store_for(f"dir:{top}", "vllm")
    assert moved is not None and moved.path != store.path


def test_small_trees_and_a_disabled_cache_keep_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HQP_CACHE", str(tmp_path / "cache"))
    small = release(tmp_path / "small", 20)
    assert copyindexcache.store_for(f"dir:{small}", "vllm") is None
    assert copyindexcache.store_for("git:https://example.invalid/x@main", "vllm") is None
    assert copyindexcache.store_for("pypi:vllm==0.29.0", "vllm") is not None
    monkeypatch.setenv("HQP_RESULT_CACHE", "0")
    assert copyindexcache.store_for("pypi:vllm==0.29.0", "vllm") is None

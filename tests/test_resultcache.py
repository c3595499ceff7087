"""The result cache of pure static results: a hit equals a fresh computation, a changed input misses,
a corrupt or foreign entry is recomputed (never trusted), and the checks that use it report the same
findings from a warm cache as from a cold one or with the cache off."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_statics_knobs import KNOBS, USER, register, tree
from test_statics_provenance import make_repo, static_findings

from hyperqwen_patches import resultcache
from hyperqwen_patches.checks.context import CheckFunction
from hyperqwen_patches.statics.compiles import check_compiles
from hyperqwen_patches.statics.gitapply import check_git_apply
from hyperqwen_patches.statics.knobs import knob_sites, parse_registry, registry_of

COMPILES = check_compiles
GITAPPLY = check_git_apply
OLD = b"".join(b"line %d\n" % i for i in range(1, 10))


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test starts with an empty cache of its own (the pristine trees here are dir: sources)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("HQP_CACHE", str(cache))
    monkeypatch.delenv(resultcache.DISABLE_ENV, raising=False)
    return cache / resultcache.SUBDIR


def entries(root: Path, name: str | None = None) -> list[Path]:
    base = root / name if name else root
    return sorted(base.rglob("*.json")) if base.exists() else []


def counting(value: object) -> tuple[list[int], object]:
    calls: list[int] = []

    def compute() -> object:
        calls.append(1)
        return value

    return calls, compute


def test_a_hit_returns_what_was_computed_without_computing(private_cache: Path) -> None:
    value = {"error": None, "warnings": [[3, "invalid escape sequence '\\d'"]]}
    calls, compute = counting(value)
    first = resultcache.cached("t", "1", (b"bytes", "path"), compute)
    second = resultcache.cached("t", "1", (b"bytes", "path"), compute)
    assert first == second == value
    assert len(calls) == 1
    [entry] = entries(private_cache, "t")
    assert not [p for p in entry.parent.iterdir() if p.name.startswith(".tmp-")]


def test_any_changed_part_misses(private_cache: Path) -> None:
    calls, compute = counting([1])
    resultcache.cached("t", "1", (b"a", b"bc"), compute)
    resultcache.cached("t", "1", (b"ab", b"c"), compute)  # same concatenation, other parts
    resultcache.cached("t", "1", (b"a", b"bd"), compute)  # one byte of input
    resultcache.cached("t", "2", (b"a", b"bc"), compute)  # the check's logic version
    resultcache.cached("u", "1", (b"a", b"bc"), compute)  # another check
    assert len(calls) == 5
    assert len(entries(private_cache)) == 5


@pytest.mark.parametrize(
    "damage",
    [
        b"",  # an empty file (a crash between create and write)
        b'{"key": "',  # half-written JSON
        b"\xff\xfe not json",
        b'{"key": "0000", "value": [2]}',  # another key's entry copied over this one
        b"[1, 2]",  # JSON, but not an entry
    ],
)
def test_a_corrupt_entry_is_recomputed_and_rewritten(private_cache: Path, damage: bytes) -> None:
    calls, compute = counting({"answer": 42})
    resultcache.cached("t", "1", (b"in",), compute)
    [entry] = entries(private_cache, "t")
    entry.write_bytes(damage)
    assert resultcache.cached("t", "1", (b"in",), compute) == {"answer": 42}
    assert len(calls) == 2
    doc = json.loads(entry.read_bytes())
    assert doc["value"] == {"answer": 42} and doc["key"] == entry.stem
    assert resultcache.cached("t", "1", (b"in",), compute) == {"answer": 42}
    assert len(calls) == 2


def test_an_unwritable_cache_costs_only_the_speed_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_bytes(b"a file where the cache dir should be")
    monkeypatch.setenv("HQP_CACHE", str(blocker))
    calls, compute = counting([7])
    assert resultcache.cached("t", "1", (b"x",), compute) == [7]
    assert resultcache.cached("t", "1", (b"x",), compute) == [7]
    assert len(calls) == 2


def test_the_cache_can_be_turned_off(private_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(resultcache.DISABLE_ENV, "0")
    calls, compute = counting([1])
    resultcache.cached("t", "1", (b"x",), compute)
    resultcache.cached("t", "1", (b"x",), compute)
    assert len(calls) == 2 and entries(private_cache) == []


def findings_three_ways(
    root: Path, target: CheckFunction, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> list[object]:
    """Cold cache, warm cache and cache off must agree; returns the findings (as tuples)."""
    cold = static_findings(root, target)
    assert entries(cache), "the check stored nothing"
    warm = static_findings(root, target)
    monkeypatch.setenv(resultcache.DISABLE_ENV, "0")
    fresh = static_findings(root, target)
    monkeypatch.delenv(resultcache.DISABLE_ENV)
    assert cold == warm == fresh
    return list(cold)


def test_compiles_from_the_cache_equals_a_fresh_compile(
    tmp_path: Path, private_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pristine = {"vllm/a.py": b"def f(x):\n    return x\n"}
    broken = b"def f(x):\n    y = (x +\n    return x\n"
    warns = b"x = 1\nsame = x is 1\n"  # SyntaxWarning: "is" with a literal
    rows = [("bad", {"vllm/a.py": broken}), ("warn", {"vllm/w.py": warns})]
    root = make_repo(tmp_path / "repo", pristine, rows)
    found = findings_three_ways(root, COMPILES, private_cache, monkeypatch)
    assert [(f.severity, f.subject) for f in found] == [  # type: ignore[attr-defined]
        ("error", "row bad: vllm/a.py:2"),
        ("warning", "row warn: vllm/w.py:2"),
    ]


def test_a_corrupt_compiles_entry_is_not_trusted(
    tmp_path: Path, private_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pristine = {"vllm/a.py": b"def f(x):\n    return x\n"}
    root = make_repo(
        tmp_path / "repo", pristine, [("bad", {"vllm/a.py": b"def f(x):\n    return (x\n"})]
    )
    before = static_findings(root, COMPILES)
    assert before
    for entry in entries(private_cache, "compiles"):
        entry.write_bytes(entry.read_bytes()[:10])  # truncated: what a torn write would leave
    assert static_findings(root, COMPILES) == before


def test_git_apply_verdicts_from_the_cache_and_a_changed_patch_misses(
    tmp_path: Path, private_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mark = {"dirty": "    git_apply: true\n"}
    dirty = OLD.replace(b"line 4\n", b"line 4\nadded \n")
    root = make_repo(
        tmp_path / "a", {"vllm/a.py": OLD}, [("dirty", {"vllm/a.py": dirty})], row_extra=mark
    )
    [finding] = findings_three_ways(root, GITAPPLY, private_cache, monkeypatch)
    assert "trailing whitespace" in finding.detail  # type: ignore[attr-defined]
    assert "patches/0001-dirty.patch" in finding.message  # type: ignore[attr-defined]
    assert len(entries(private_cache, "git-apply")) == 1
    # The same row name and patch file name, clean content: a miss, and git's fresh verdict.
    clean = OLD.replace(b"line 4\n", b"line 4\nadded\n")
    other = make_repo(
        tmp_path / "b", {"vllm/a.py": OLD}, [("dirty", {"vllm/a.py": clean})], row_extra=mark
    )
    assert static_findings(other, GITAPPLY) == []
    assert len(entries(private_cache, "git-apply")) == 2


def test_the_tree_under_a_git_apply_row_is_part_of_the_key(
    tmp_path: Path, private_cache: Path
) -> None:
    """Same patch bytes on another pristine file: git must be asked again, not the cache."""
    mark = {"edit": "    git_apply: true\n"}
    new = OLD.replace(b"line 4\n", b"line 4\nours\n")
    root = make_repo(
        tmp_path / "a", {"vllm/a.py": OLD}, [("edit", {"vllm/a.py": new})], row_extra=mark
    )
    assert static_findings(root, GITAPPLY) == []
    # The same patch file, copied onto a tree where its context is gone.
    other = make_repo(
        tmp_path / "b", {"vllm/a.py": OLD}, [("edit", {"vllm/a.py": new})], row_extra=mark
    )
    (other.parent / "pristine" / "vllm" / "a.py").write_bytes(OLD.replace(b"line 3\n", b"LINE 3\n"))
    found = static_findings(other, GITAPPLY)
    assert len(entries(private_cache, "git-apply")) == 2
    assert [f.subject for f in found] == ["row edit"]


def test_knob_results_from_the_cache_equal_fresh_ones(
    tmp_path: Path, private_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = USER + (
        b"\n\ndef g(env=None):\n"
        b"    env = os.environ if env is None else env\n"
        b'    a = os.getenv("VLLM_BARE")\n'
        b'    return env.get("VLLM_X"), envs.VLLM_NEW, envs.VLLM_NOPE, a\n'
    )
    rows = [
        ("reg", {"vllm/envs.py": register("VLLM_NEW", ignore=True)}),
        ("use", {"vllm/user.py": user}),
    ]
    root = make_repo(tmp_path / "repo", tree(), rows)
    found = findings_three_ways(root, KNOBS, private_cache, monkeypatch)
    messages = sorted(f.message.split(" ")[0] for f in found)  # type: ignore[attr-defined]
    assert messages == ["VLLM_BARE", "VLLM_NEW", "VLLM_NOPE", "os.environ"]
    assert entries(private_cache, "knobs-registry") and entries(private_cache, "knobs-sites")


def test_the_cached_registry_and_sites_equal_the_parse(private_cache: Path) -> None:
    import ast

    data = register("VLLM_NEW", ignore=True)
    fresh = parse_registry(ast.parse(data))
    assert registry_of(data) == fresh  # computed and stored
    assert registry_of(data) == fresh  # read back
    # In line order, not sorted: the findings about the rows' entries follow this order.
    cold = list(fresh.entries)
    assert cold == ["VLLM_OLD", "VLLM_PORT", "VLLM_NEW"]
    assert list(registry_of(data).entries) == cold  # type: ignore[union-attr]
    assert registry_of(b"def broken(:\n") is None
    assert registry_of(b"def broken(:\n") is None
    source = USER + b'\n\ndef g():\n    return os.environ["VLLM_A"]\n'
    sites = knob_sites(ast.parse(source), ("VLLM_",))
    assert json.loads(json.dumps(sites)) == sites  # what the cache stores round-trips exactly
    assert sites["direct"] == [["VLLM_OLD", "envs", 7, 7], ["VLLM_A", "bare", 11, 11]]


def test_entries_are_written_whole(private_cache: Path) -> None:
    """Every entry on disk is complete JSON holding its own key (temp file + rename)."""
    for i in range(20):
        resultcache.cached("t", "1", (str(i),), lambda i=i: {"i": i, "pad": "x" * 5000})
    for entry in entries(private_cache, "t"):
        doc = json.loads(entry.read_bytes())
        assert doc["key"] == entry.stem and doc["value"]["pad"] == "x" * 5000
    assert not [n for n in os.listdir(private_cache / "t") if not n.endswith(".json")]

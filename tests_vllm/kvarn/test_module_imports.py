"""The KVarN package's modules form no import circle, and the decode's modules (issue #40: the
policy, the kernels by concept, the launch binding) and the store each import alone, first, in a
fresh process."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "kvarn/files/vllm/v1/attention/ops/kvarn"
# the decode's @triton.jit code, by concept (issue #40)
KERNELS = (
    "decode_shares",
    "decode_rotation",
    "decode_bytes",
    "decode_words",
    "decode_kernels",
    "decode_combine",
)


def import_graph(pkg: Path) -> dict[str, set[str]]:
    """module -> the package modules it imports relatively, anywhere in it (a function's lazy import
    counts: it closes a circle as surely at run time)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(pkg.glob("*.py")):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    deps.add(node.module.split(".")[0])
                else:
                    deps |= {a.name for a in node.names}
        graph[path.stem] = deps - {path.stem}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every module path that comes back to where it started (depth-first, each start once)."""
    found = []

    def walk(node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt == path[0]:
                found.append([*path, nxt])
            elif nxt not in path and nxt != "__init__":
                walk(nxt, [*path, nxt])

    for start in sorted(graph):
        if start != "__init__":
            walk(start, [start])
    return found


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = import_graph(PKG)
    assert set(KERNELS) | {"decode_plan", "triton_decode", "triton_store"} <= set(graph)
    assert circles(graph) == []
    # the layers of the decode: policy <- kernels, both <- binding; the store asks the policy only;
    # the Triton modules import only one another (no policy, no torch-side module)
    assert graph["decode_plan"] <= {"config"}
    for kernels in KERNELS:
        assert graph[kernels] <= set(KERNELS), kernels
        assert "triton_decode" not in graph[kernels]
    assert "triton_decode" not in graph["triton_store"]


def test_a_planted_circle_is_found() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [
        ["a", "b", "c", "a"],
        ["b", "c", "a", "b"],
        ["c", "a", "b", "c"],
    ]


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("triton") is None,
    reason="the Triton modules need torch and triton",
)
@pytest.mark.parametrize(
    "module", ["decode_plan", *KERNELS, "triton_decode", "triton_store", "step"]
)
def test_each_module_imports_alone(module: str) -> None:
    code = (
        "import importlib, importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('kv', {str(PKG / '__init__.py')!r},"
        f" submodule_search_locations=[{str(PKG)!r}])\n"
        "mod = importlib.util.module_from_spec(spec); sys.modules['kv'] = mod\n"
        "spec.loader.exec_module(mod)\n"
        f"importlib.import_module('kv.{module}')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]

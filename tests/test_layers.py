"""The package's layout stays true (``hyperqwen_patches/layers.py``): no import runs upward across the
stages, the shared ground imports no stage, and no two modules import each other, directly or round a
longer circle. Imports inside functions and under ``TYPE_CHECKING`` count: they are dependencies a
reader has to follow all the same."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import hyperqwen_patches
from hyperqwen_patches.layers import SHARED, STAGES

PKG = Path(hyperqwen_patches.__file__).parent
NAME = "hyperqwen_patches"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([NAME, *parts])


def imports(path: Path, here: str | None = None) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every import of the package in one file."""
    here = here or module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == NAME:
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != NAME:
                continue
            for alias in node.names:
                # `from pkg import module` imports the module; `from module import name`, the module
                sub = f"{target}.{alias.name}"
                yield node.lineno, sub if _is_module(sub) else target


def _is_module(dotted: str) -> bool:
    rel = Path(*dotted.split(".")[1:])
    return (PKG / rel).with_suffix(".py").is_file() or (PKG / rel / "__init__.py").is_file()


def rank(module: str) -> int | None:
    """The stage's place, lowest 0; None for the shared ground (and the package root)."""
    parts = module.split(".")
    if len(parts) == 1:
        return None
    top = parts[1]
    if top in SHARED:
        return None
    if top == "__main__":
        return STAGES.index("cli")
    assert top in STAGES, f"{module}: not in a stage or the shared ground (layers.py)"
    return STAGES.index(top)


FILES = sorted(PKG.rglob("*.py"))


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in FILES:
        edges.setdefault(module_name(path), set()).update(t for _, t in imports(path))
    return edges


def upward(path: Path, here: str) -> list[str]:
    mine = rank(here)
    bad = []
    for line, target in imports(path, here):
        theirs = rank(target)
        if theirs is None and target != NAME:
            continue  # the shared ground is everyone's
        if mine is None and target != NAME:
            bad.append(f"{path.name}:{line}: the shared ground imports {target}")
        elif mine is not None and theirs is not None and theirs > mine:
            bad.append(f"{path.name}:{line}: {STAGES[mine]} imports {target} ({STAGES[theirs]})")
    return bad


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PKG)))
def test_no_import_runs_upward(path: Path) -> None:
    bad = upward(path, module_name(path))
    assert not bad, "\n".join(bad)


def find_circles(edges: dict[str, set[str]]) -> list[list[str]]:
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(mod: str, stack: list[str]) -> None:
        state[mod] = 1
        stack.append(mod)
        for t in sorted(edges.get(mod, ())):
            if state.get(t) == 1:
                circles.append([*stack[stack.index(t) :], t])
            elif t not in state:
                visit(t, stack)
        stack.pop()
        state[mod] = 2

    for mod in sorted(edges):
        if mod not in state:
            visit(mod, [])
    return circles


def test_no_import_circles() -> None:
    edges = graph()
    # A package's __init__ importing its own modules is how a package re-exports; not a circle.
    for mod, targets in edges.items():
        targets.discard(mod)
        if (PKG / Path(*mod.split(".")[1:]) / "__init__.py").is_file():
            edges[mod] = {t for t in targets if not t.startswith(mod + ".")}
    circles = find_circles(edges)
    assert not circles, "\n".join(" -> ".join(c) for c in circles)


def test_the_circle_walk_finds_a_circle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_circles(edges) == [["a", "b", "c", "a"]]


def test_the_rule_catches_an_upward_import(tmp_path: Path) -> None:
    """The walk itself: an engine module importing a command is reported (so the test can fail)."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from hyperqwen_patches.commands import check\n")
    bad = upward(probe, "hyperqwen_patches.engine.probe")
    assert bad == ["probe.py:2: engine imports hyperqwen_patches.commands.check (commands)"]
    shared = upward(probe, "hyperqwen_patches.console")
    assert shared == ["probe.py:2: the shared ground imports hyperqwen_patches.commands.check"]


def test_every_module_is_in_a_stage_or_shared() -> None:
    for path in FILES:
        rank(module_name(path))  # asserts


# --- modules named by string ----------------------------------------------------------------------
# A module named in a string ("hyperqwen_patches.fork.checks" or "hyperqwen_patches.fork.checks:f",
# imported at run time) is a dependency all the same: the command table of the fast path names its
# commands so. The rule holds for those too, so the check pipeline cannot go back to naming a later
# stage's checks by string from below (checklist.py imports them, above every stage it runs).

_NAMED = re.compile(rf"^{NAME}(\.[a-z_][a-z0-9_]*)+(:[A-Za-z_][A-Za-z0-9_]*)?$")


def named_modules(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) for every string constant in one file that names a module of the package."""
    for node in ast.walk(ast.parse(path.read_bytes())):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _NAMED.match(node.value)
            and _is_module(module := node.value.partition(":")[0])
        ):
            yield node.lineno, module


def upward_by_name(path: Path, here: str) -> list[str]:
    mine = rank(here)
    bad = []
    for line, target in named_modules(path):
        theirs = rank(target)
        if mine is not None and theirs is not None and theirs > mine:
            bad.append(f"{path.name}:{line}: {STAGES[mine]} names {target} ({STAGES[theirs]})")
    return bad


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PKG)))
def test_no_module_named_by_string_runs_upward(path: Path) -> None:
    bad = upward_by_name(path, module_name(path))
    assert not bad, "\n".join(bad)


def test_the_rule_catches_a_check_named_by_string_from_below(tmp_path: Path) -> None:
    """What checks/pipeline.py did before checklist.py: a later stage's check named by string."""
    probe = tmp_path / "probe.py"
    probe.write_text('PIPELINE = ("hyperqwen_patches.fork.checks:check_export",)\n')
    bad = upward_by_name(probe, "hyperqwen_patches.checks.probe")
    assert bad == ["probe.py:1: checks names hyperqwen_patches.fork.checks (fork)"]


def _check_functions() -> set[str]:
    """Every ``check_*(ctx: CheckContext)`` function the package defines, as module:function."""
    found = set()
    for path in FILES:
        for node in ast.parse(path.read_bytes()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("check_"):
                args = node.args.args
                if args and isinstance(args[0].annotation, ast.Name | ast.Constant):
                    annotation = args[0].annotation
                    text = annotation.id if isinstance(annotation, ast.Name) else annotation.value
                    if text == "CheckContext":
                        found.add(f"{module_name(path)}:{node.name}")
    return found


def test_every_check_of_every_stage_is_in_the_pipeline() -> None:
    """A check function written and never added to checklist.PIPELINE would never run."""
    from hyperqwen_patches.checklist import BACKGROUND, PIPELINE

    listed = {f"{c.__module__}:{c.__name__}" for c in PIPELINE}
    assert _check_functions() == listed
    assert set(PIPELINE) >= BACKGROUND
    assert len(set(PIPELINE)) == len(PIPELINE)

"""Small concepts the code base wrote several times, with differences, and now writes once (#41): the
bytes-to-display-text decode (``display.show``), the severity of a finding (``checks/context.py``),
an exclusive flock (``flocks.py``). A copy that comes back is found here by reading the source, as a
reader would. The modules another branch is reshaping keep theirs until it lands (``PENDING``)."""

from __future__ import annotations

import ast
from pathlib import Path

import hyperqwen_patches

PKG = Path(hyperqwen_patches.__file__).parent

# Left alone while another branch reshapes them; each goes once that branch has landed.
PENDING: dict[str, set[str]] = {"severity": set(), "flock": set()}


def sources() -> dict[str, ast.Module]:
    return {p.relative_to(PKG).as_posix(): ast.parse(p.read_bytes()) for p in PKG.rglob("*.py")}


def decode_helpers(tree: ast.Module) -> list[str]:
    """Functions whose whole work is ``return x.decode(..., "backslashreplace")``."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        body = [
            s
            for s in node.body
            if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
        ]
        last = body[-1] if body else None
        if (
            isinstance(last, ast.Return)
            and isinstance(last.value, ast.Call)
            and isinstance(last.value.func, ast.Attribute)
            and last.value.func.attr == "decode"
            and "backslashreplace" in ast.unparse(last.value)
        ):
            found.append(node.name)
    return found


def test_one_helper_turns_bytes_into_display_text() -> None:
    found = {f"{path}:{name}" for path, tree in sources().items() for name in decode_helpers(tree)}
    assert found == {"display.py:show"}


def test_one_severity_of_a_finding() -> None:
    defined = {
        path
        for path, tree in sources().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "Severity" for t in node.targets)
    }
    assert defined - PENDING["severity"] == {"checks/context.py"}


def test_one_exclusive_flock_helper() -> None:
    """A flock is taken (any ``fcntl.flock`` but an unlock) in flocks.py; cachedir's shared lock and
    its prune probe (``entry_lock_if_free``, which yields whether it got the lock) are the one other
    place."""
    taking = set()
    for path, tree in sources().items():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and ast.unparse(node.func) == "fcntl.flock"
                and ast.unparse(node.args[1]) != "fcntl.LOCK_UN"
            ):
                taking.add(path)
    assert taking - PENDING["flock"] == {"flocks.py", "cachedir.py"}

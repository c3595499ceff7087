"""Every module of the package imports alone, as ``python -c 'import X'`` would, so an import circle
or a name a module uses at import time without importing it fails here, whichever module a command
happens to import first (most modules import the package's other modules inside functions, so the
order a test run imports them in hides such a bug).

One subprocess, not one interpreter per module (100 starts): it imports no module of the package,
then forks once per module; each child imports its one module into a copy of that clean interpreter
and exits. Sequential, so it takes one core (~2-3 s here).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import hyperqwen_patches

PKG = Path(hyperqwen_patches.__file__).parent
# ``python -m hyperqwen_patches`` runs the CLI: importing __main__ would run it, not test it.
RUNS_ON_IMPORT = {"hyperqwen_patches.__main__"}

# Fork per module; a child prints its traceback and exits 1. The parent prints one line per module
# that failed and exits 1 when any did.
LOOP = textwrap.dedent(
    """
    import importlib, os, sys, traceback

    failed = []
    for name in sys.argv[1:]:
        sys.stdout.flush(); sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                importlib.import_module(name)
            except BaseException:
                sys.stderr.write(f"--- import {name}\\n")
                traceback.print_exc()
                sys.stderr.flush()
                os._exit(1)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            failed.append(name)
    for name in failed:
        print(f"does not import alone: {name}")
    sys.exit(1 if failed else 0)
    """
)


def modules(root: Path = PKG) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join([root.name, *parts])
        if name not in RUNS_ON_IMPORT:
            out.append(name)
    return out


def import_each_alone(names: list[str], *, path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(path)}
    return subprocess.run(
        [sys.executable, "-c", LOOP, *names],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def test_every_module_imports_alone_in_a_fresh_interpreter() -> None:
    names = modules()
    assert len(names) > 90 and "hyperqwen_patches.fork.replay" in names
    proc = import_each_alone(names, path=PKG.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]


def test_an_import_circle_and_a_missing_import_are_caught(tmp_path: Path) -> None:
    """The loop itself can fail: a two-module circle (each needs a name of the other at import
    time) and a module-level use of a name it never imported, in a scratch package."""
    pkg = tmp_path / "probe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from probe.b import B\nA = 1\n")
    (pkg / "b.py").write_text("from probe.a import A\nB = 2\n")
    (pkg / "c.py").write_text("Reader = Callable[[bytes], bytes]\n")
    (pkg / "d.py").write_text("import os\n")
    proc = import_each_alone(modules(pkg), path=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "does not import alone: probe.a",
        "does not import alone: probe.b",
        "does not import alone: probe.c",
    ]
    assert "partially initialized module" in proc.stderr
    assert "NameError: name 'Callable' is not defined" in proc.stderr

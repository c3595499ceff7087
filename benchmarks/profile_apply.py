"""Where one ``apply`` spends its wall time, by phase, without a profiler's overhead.

cProfile inflates a 90 ms run by half and ``-X importtime`` by more; this runs ``apply`` once in
process with a wall-clock timer around a few named functions (summed over their calls; a function
that runs in the writer threads is summed over the threads, so it can exceed the run) and prints
the imports, the whole command and each phase. The tree must be in its pristine state (put the
touched files back between runs, as ``bench_ab.py`` does).

Run:  env -u PYTHONDONTWRITEBYTECODE HQP_CACHE=... .venv/bin/python benchmarks/profile_apply.py \\
          DIR --repo REPO

Not a test: what it prints went into docs/performance.md ("Against `git apply`").
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable
from typing import Any

T0 = time.perf_counter()
from hyperqwen_patches import cli  # noqa: E402
from hyperqwen_patches.commands import apply as _apply  # noqa: E402,F401
from hyperqwen_patches.sources import tree as _tree  # noqa: E402,F401

IMPORTED = time.perf_counter() - T0

# (module, attribute path) of the phases timed
PHASES = [
    ("hyperqwen_patches.commands.apply", "default_series"),
    ("hyperqwen_patches.series.rows", "load_series"),
    ("hyperqwen_patches.engine.patchscan", "parse_patch"),
    ("hyperqwen_patches.sources.tree", "Tree.read"),
    ("hyperqwen_patches.sources.tree", "Tree.write"),
    ("hyperqwen_patches.sources.tree", "Tree.resolve"),
    ("hyperqwen_patches.sources.tree", "_write_temps"),
    ("hyperqwen_patches.sources.tree", "_flock"),
    ("hyperqwen_patches.sources.tree", "_signing_key"),
    ("hyperqwen_patches.sources.confined", "Confined.unchanged"),
    ("hyperqwen_patches.sources.journal", "write"),
    ("hyperqwen_patches.sources.journal", "write_temp"),
    ("hyperqwen_patches.sources.journal", "remove"),
    ("os", "rename"),
]


def _timed(name: str, fn: Callable[..., Any], spent: dict[str, float]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - start

    return timed


def main() -> int:
    spent: dict[str, float] = {}
    for module, path in PHASES:
        owner: Any = importlib.import_module(module)
        *outer, attr = path.split(".")
        for part in outer:
            owner = getattr(owner, part)
        name = f"{module.rsplit('.', 1)[-1]}.{path}"
        setattr(owner, attr, _timed(name, getattr(owner, attr), spent))
    sys.argv = ["hyperqwen-patches", "apply", *sys.argv[1:]]
    start = time.perf_counter()
    code = 0
    try:
        cli.main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    whole = time.perf_counter() - start
    out = sys.stderr
    print(f"imports of the apply path: {IMPORTED * 1e3:.1f} ms", file=out)
    print(f"apply (exit {code}): {whole * 1e3:.1f} ms", file=out)
    for name, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"  {name}: {seconds * 1e3:.1f} ms", file=out)
    return code


if __name__ == "__main__":
    raise SystemExit(main())

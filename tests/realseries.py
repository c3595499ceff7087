"""A realistic downstream series, generated: what a project maintained with shell scripts looks like.

``write_project(dest)`` writes, deterministically (seeded):

- ``pristine/vllm/``: a synthetic release (``0.31.0``) of about 60 Python files, with a
  ``vllm/envs.py`` shaped like vLLM's (annotations under ``TYPE_CHECKING``, ``environment_variables``,
  ``compile_factors`` with an ignore list);
- ``project/``: the series as such a project keeps it. A quilt-style ``patches/series`` (comments,
  blank lines) of 48 patch files with package-relative paths (``a/v1/...``, applied inside the
  package), then a second ordered list ``kvarn/apply-order`` of 4 more files, a module directory
  ``kvarn/modules/`` copied into the tree, ``docker/requirements.txt`` with the pin and a hand-written
  ``PATCHES.md``.

The quirks the issues list are all in it, each on a known row (``Quirks``): layered rows (a later row
edits lines an earlier one added), a row editing a file an earlier row creates, rows exported out of
order (their hunks land at an offset), header lines (``Kind:``, ``What:``, ``Upstream:``,
``Cut-against:`` with a note, ``Retires-when:``) with some absent, a ``diff --git`` line naming another
file than its ``---``/``+++`` lines, ``index`` lines with mode 100755 on 0644 files, non-ASCII UTF-8 in
preambles and content, a preamble with a lone ``---`` line and an ``--- exported from ... ---`` marker,
and a row that keeps four runtime-only knobs off ``compile_factors``' key.

Nothing here is copied from a real series; it is generated so that tests and the benchmark can run
anywhere. ``python tests/realseries.py DEST`` writes it for a person to look at.
"""

from __future__ import annotations

import difflib
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

PIN = "0.31.0"
PACKAGE = "vllm"
N_SERIES = 48
N_APPEND = 4
RUNTIME_KNOBS = (
    "VLLM_WATCHDOG_TIMEOUT_S",
    "VLLM_WATCHDOG_ENABLED",
    "VLLM_STATS_LOG_INTERVAL_S",
    "VLLM_UNUSED_DUMP_PATH",
)

_DIRS = (
    "v1/worker",
    "v1/core/sched",
    "v1/attention/backends",
    "v1/engine",
    "model_executor/layers",
    "model_executor/models",
    "distributed",
    "entrypoints/openai",
    "config",
    "utils",
)
_WORDS = (
    "block",
    "cache",
    "worker",
    "sched",
    "token",
    "graph",
    "memory",
    "layer",
    "request",
    "stream",
    "batch",
    "kernel",
    "prefix",
    "spec",
    "draft",
)


@dataclass
class Quirks:
    """Which row carries which quirk (1-based positions in the combined order: series, then append)."""

    layered: list[tuple[int, int]] = field(default_factory=list)  # (earlier, later)
    creates: tuple[int, int] = (0, 0)  # (row creating a file, later row editing it)
    offset_rows: list[int] = field(default_factory=list)
    git_mismatch: int = 0  # diff --git names another file than ---/+++
    index_mode: int = 0  # index line with 100755 for a 0644 file
    lone_dashes: int = 0  # preamble with a lone --- and an --- exported from ... --- marker
    runtime_knobs: int = 0
    missing_headers: list[int] = field(default_factory=list)


@dataclass
class Project:
    root: Path  # the project (the repository a maintainer would adopt)
    pristine: Path  # the release's directory that holds vllm/
    series_files: list[str]  # repo-relative, in order (series, then the appended list)
    quirks: Quirks


def _module_text(rng: random.Random, path: str, n_funcs: int) -> list[str]:
    name = path.rsplit("/", 1)[-1].removesuffix(".py")
    lines = [
        f'"""{name}: part of the synthetic release {PIN} (generated for tests)."""\n',
        "\n",
        "from __future__ import annotations\n",
        "\n",
        "import math\n",
        "\n",
    ]
    for i in range(n_funcs):
        a, b = rng.choice(_WORDS), rng.choice(_WORDS)
        lines += [
            "\n",
            f"def {a}_{b}_{i}(x: int, scale: float = 1.0) -> float:\n",
            f'    """Compute the {a} {b} figure #{i}."""\n',
            f"    y = x * {rng.randint(2, 97)} + {rng.randint(0, 999)}\n",
            "    if y < 0:\n",
            "        return 0.0\n",  # repeated on purpose: context that matches in many places
            f"    z = math.sqrt(y) * scale + {i}\n",
            "    return z\n",
        ]
    return lines


def _envs_text() -> list[str]:
    knobs = [f"VLLM_SYN_KNOB_{i}" for i in range(12)]
    lines = [
        '"""Environment knobs of the synthetic release (shaped like vLLM\'s vllm/envs.py)."""\n',
        "\n",
        "from __future__ import annotations\n",
        "\n",
        "import hashlib\n",
        "import os\n",
        "from typing import TYPE_CHECKING, Any\n",
        "\n",
        "if TYPE_CHECKING:\n",
    ]
    lines += [f"    {k}: int = 0\n" for k in knobs]
    lines += ["\n", "environment_variables: dict[str, Any] = {\n"]
    lines += [f'    "{k}": lambda: int(os.getenv("{k}", "0")),\n' for k in knobs]
    lines += [
        "}\n",
        "\n",
        "\n",
        "def compile_factors() -> dict[str, object]:\n",
        '    """The knobs that are part of the torch.compile cache key."""\n',
        "    ignored_factors = {\n",
        '        "VLLM_SYN_KNOB_0",\n',
        "    }\n",
        "    factors: dict[str, object] = {}\n",
        "    for name, getter in environment_variables.items():\n",
        "        if name in ignored_factors:\n",
        "            continue\n",
        "        factors[name] = getter()\n",
        "    return factors\n",
        "\n",
        "\n",
        "def __getattr__(name: str) -> Any:\n",
        "    if name in environment_variables:\n",
        "        return environment_variables[name]()\n",
        '    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")\n',
        "\n",
        "\n",
        "def compute_hash() -> str:\n",
        "    return hashlib.sha256(repr(sorted(compile_factors().items())).encode()).hexdigest()\n",
    ]
    return lines


def _release(rng: random.Random) -> dict[str, list[str]]:
    files: dict[str, list[str]] = {"envs.py": _envs_text(), "__init__.py": ['"""vllm."""\n']}
    for d in _DIRS:
        files[f"{d}/__init__.py"] = []
        for j in range(5):
            path = f"{d}/{rng.choice(_WORDS)}_{rng.choice(_WORDS)}_{j}.py"
            files[path] = _module_text(rng, path, rng.randint(8, 30))
    return files


def _udiff(path: str, old: list[str] | None, new: list[str]) -> list[str]:
    a = f"a/{path}" if old is not None else "/dev/null"
    return list(difflib.unified_diff(old or [], new, a, f"b/{path}", n=3))


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.pristine = _release(self.rng)
        self.state = {p: list(c) for p, c in self.pristine.items()}
        self.quirks = Quirks()

    def added_by(self, row: int) -> list[tuple[str, int]]:
        """Where the lines ``row`` added or changed are now (every such line carries its mark)."""
        mark = f"# row {row}:"
        return [
            (path, i)
            for path, lines in sorted(self.state.items())
            for i, text in enumerate(lines)
            if mark in text
        ]

    def edit(self, row: int, path: str) -> None:
        """One edit of ``path``: two lines inserted after a body line, or a body line changed."""
        lines = self.state[path]
        rng = self.rng
        body = [
            i for i, text in enumerate(lines) if text.startswith("    y = ") and "# row" not in text
        ]
        spot = rng.choice(body) + 1
        if rng.random() < 0.6:
            lines[spot:spot] = [
                f"    y = y + {rng.randint(1, 50)}  # row {row}: naïve fix, façade kept\n",
                f"    scale = max(scale, {rng.randint(1, 9)}.0)  # row {row}: floor\n",
            ]
        else:
            lines[spot - 1] = (
                lines[spot - 1].rstrip("\n") + f" - {rng.randint(1, 9)}  # row {row}: tweak\n"
            )

    def revise(self, row: int, earlier: int) -> str:
        """Rewrite a line ``earlier`` added: the later row's context is the earlier row's lines."""
        path, i = self.rng.choice(self.added_by(earlier))
        text = self.state[path][i]
        self.state[path][i] = text.replace(
            f"# row {earlier}:", f"# row {row}: revised row {earlier}:"
        )
        return path


def _preamble(n: int, name: str, meta: dict[str, str | None], quirk_dashes: bool) -> list[str]:
    subject = name.replace("-", " ")
    lines = [
        "From: Ana Núñez <ana@example.invalid>\n",
        f"Subject: [PATCH {n:02d}] {subject} (café edition)\n",
        "\n",
        f"Keeps {subject} working on our deployment; résumé of the change below.\n",
        "\n",
    ]
    for key in ("Kind", "What", "Upstream", "Cut-against", "Retires-when"):
        value = meta.get(key)
        if value is not None:
            lines.append(f"{key}: {value}\n")
    if quirk_dashes:
        lines += ["\n", "---\n", "--- exported from fork@0123abcd ---\n", "\n"]
    else:
        lines += ["---\n"]
    return lines


def write_project(dest: Path, *, seed: int = 31) -> Project:
    """Write the release and the project under ``dest``; return where everything is."""
    b = _Builder(seed)
    rng = b.rng
    total = N_SERIES + N_APPEND
    q = b.quirks
    q.layered = [(3, 9), (9, 17), (12, 30), (20, 44), (44, N_SERIES + 2)]
    q.creates = (6, 14)
    q.offset_rows = [11, 25, 38]
    q.git_mismatch = 21
    q.index_mode = 27
    q.lone_dashes = 33
    q.runtime_knobs = 40
    q.missing_headers = [5, 19, 36]
    layered_later = {later: earlier for earlier, later in q.layered}
    new_file = "v1/worker/draft_pool.py"

    py_files = sorted(p for p in b.pristine if p.endswith(".py") and b.pristine[p])
    py_files = [p for p in py_files if p != "envs.py" and not p.endswith("__init__.py")]
    row_files: dict[int, list[str]] = {}
    names: dict[int, str] = {}
    patches: dict[int, str] = {}
    for n in range(1, total + 1):
        before = {p: list(c) for p, c in b.state.items()}
        name = f"{rng.choice(_WORDS)}-{rng.choice(_WORDS)}-{n}"
        touched: list[str] = []
        if n == q.creates[0]:
            b.state[new_file] = _module_text(rng, new_file, 4)
            touched.append(new_file)
        elif n == q.creates[1]:
            b.edit(n, new_file)
            touched.append(new_file)
        elif n == q.runtime_knobs:
            env = b.state["envs.py"]
            at = env.index("environment_variables: dict[str, Any] = {\n") - 1
            env[at:at] = [f"    {k}: int = 0\n" for k in RUNTIME_KNOBS]
            close = env.index("}\n")
            env[close:close] = [
                f'    "{k}": lambda: int(os.getenv("{k}", "0")),\n' for k in RUNTIME_KNOBS
            ]
            ign = env.index("    ignored_factors = {\n") + 1
            env[ign:ign] = [
                f'        "{k}",  # runtime only: hashing it cost a cold compile\n'
                for k in RUNTIME_KNOBS
            ]
            touched.append("envs.py")
        elif n in layered_later:
            touched.append(b.revise(n, layered_later[n]))
        else:
            for path in rng.sample(py_files, rng.randint(1, 3)):
                for _ in range(rng.randint(1, 3)):
                    b.edit(n, path)
                touched.append(path)
        row_files[n] = touched
        names[n] = name
        out: list[str] = []
        for path in sorted(set(touched)):
            old = before.get(path)
            diff = _udiff(path, old, b.state[path])
            if n in q.offset_rows and old is not None:
                diff = _shift(diff, -3)  # exported before a 3-line insertion above it landed
            if n == q.git_mismatch and not out:
                diff = [f"diff --git a/{path}.orig b/{path}.orig\n", *diff]
            elif n == q.index_mode and not out:
                diff = [f"diff --git a/{path} b/{path}\n", "index 1a2b3c4..5d6e7f8 100755\n", *diff]
            out += diff
        meta: dict[str, str | None] = {
            "Kind": rng.choice(("fix", "feature", "local", "backport")),
            "What": f"{name.replace('-', ' ')}: keeps the façade straight",
            "Upstream": None,
            "Cut-against": rng.choice(
                (PIN, f"{PIN}: adapted to #54809", f"{PIN}, hand-resolved against #53110")
            ),
            "Retires-when": f"upstream carries #{50000 + n}",
        }
        if meta["Kind"] == "backport":
            meta["Upstream"] = f"https://github.com/vllm-project/vllm/pull/{50000 + n}"
        if n in q.missing_headers:
            meta = {
                "Kind": None,
                "What": None,
                "Upstream": None,
                "Cut-against": None,
                "Retires-when": None,
            } | ({"What": meta["What"]} if n == q.missing_headers[0] else {})
        patches[n] = "".join(_preamble(n, name, meta, n == q.lone_dashes) + out)

    root = dest / "project"
    pristine = dest / "pristine"
    for path, content in b.pristine.items():
        target = pristine / PACKAGE / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("".join(content), encoding="utf-8")
    series_files: list[str] = []
    series_lines = ["# Applied in order by scripts/apply-series.sh (quilt format).\n", "\n"]
    append_lines = ["# applied after patches/series\n"]
    for n in range(1, total + 1):
        if n <= N_SERIES:
            fname = f"{n:04d}-{names[n]}.patch"
            rel = f"patches/{fname}"
            if n in (10, 30):
                series_lines += ["\n", f"# --- group {n // 10} ---\n"]
            series_lines.append(fname + "\n")
        else:
            fname = f"{n - N_SERIES:04d}-kvarn-{names[n]}.patch"
            rel = f"kvarn/{fname}"
            append_lines.append(fname + "\n")
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(patches[n].encode("utf-8"))
        series_files.append(rel)
    (root / "patches/series").write_text("".join(series_lines), encoding="utf-8")
    (root / "kvarn/apply-order").write_text("".join(append_lines), encoding="utf-8")
    modules = root / "kvarn/modules/v1/attention/ops/kvarn"
    modules.mkdir(parents=True)
    (modules / "__init__.py").write_text(
        '"""KVarN ops (module directory copied into the tree)."""\n'
    )
    (modules / "codec.py").write_text("def encode(x):\n    return x  # ü\n", encoding="utf-8")
    (root / "docker").mkdir()
    (root / "docker/requirements.txt").write_text(f"# the pin\nvllm=={PIN}\ntransformers>=4.50\n")
    (root / "PATCHES.md").write_text("# Our patches\n\nHand-written; see patches/series.\n")
    return Project(root, pristine, series_files, q)


def _shift(diff: list[str], by: int) -> list[str]:
    import re

    out = []
    for line in diff:
        m = re.match(r"@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@(.*)", line, re.S)
        if m:
            old = max(1, int(m[1]) + by)
            new = max(1, int(m[3]) + by)
            line = f"@@ -{old}{m[2] or ''} +{new}{m[4] or ''} @@{m[5]}"
        out.append(line)
    return out


if __name__ == "__main__":
    project = write_project(Path(sys.argv[1]))
    print(project.root)

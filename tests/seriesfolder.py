"""A second realistic downstream series, generated: a series kept in its own folder beside another
release's, with its own checks (issue #38's 18-row series, in shape; nothing copied from it).

``write_project(dest)`` writes, deterministically (seeded):

- ``pristine/vllm/``: a synthetic release (``0.29.0``), the same generator as ``realseries.py``;
- ``project/``: a repository that carries two series. The previous release's (``0.28.0``, the one
  ``docker/requirements.txt`` pins for another build) in ``patches/series`` with its files and a
  hand-written ``PATCHES.md``; and the one to adopt in ``patches/vllm-0.29/``: its own quilt
  ``series`` (comments, ``-p1`` on every entry, a comment after one entry and after the last), 18
  patch files with package-relative paths (``a/v1/...``), a ``SHA256SUMS`` of them, a
  ``check_series.sh`` that runs GNU patch at fuzz 0 and ``git apply --check --ignore-whitespace`` on
  every one, a ``README.md`` table of the rows with their kinds, and a module directory
  ``modules/`` copied into the package.

Its quirks, each on a known row (``Quirks``): preambles of prose, then a header block (``Kind:``,
``What:`` continued on an indented line, ``Upstream:``, ``Cut-against:``, ``Retires-when:``), then
an ``exported from qwen38/0.29 <sha>`` marker; one preamble whose first paragraph has the prose line
``kind: fix. Retires when upstream takes it.``; a header-less file; a layered pair (a later row
edits a line an earlier one added); one file saved with CRLF endings (``crlf=False`` leaves it LF);
a row that keeps two runtime-only knobs off ``compile_factors``' key under a comment saying why
(``knob_comment=False`` leaves the comment out).

``python tests/seriesfolder.py DEST [--lf] [--root-paths]`` writes it for a person to look at, with
``DEST/next/``, a synthetic next release to port to (docs/adopting.md walks through it).
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

from realseries import _WORDS, _Builder, _udiff

PIN = "0.29.0"
OTHER_PIN = "0.28.0"
PACKAGE = "vllm"
BRANCH = "qwen38/0.29"
FOLDER = "patches/vllm-0.29"
N_ROWS = 18
RUNTIME_KNOBS = ("VLLM_DISPATCH_TRACE", "VLLM_DISPATCH_TRACE_PATH")
KNOB_REASON = "Runtime-only dispatch evidence; does not alter generated code."
PROSE_KIND = "kind: fix. Retires when upstream takes it."
LINE_COMMENT = "flaky on the H100 runners; see README"
SERIES_TAIL = "end of the 0.29 series: modules/ is copied by the image build."


@dataclass
class Quirks:
    """Which row carries which quirk (1-based positions in the folder's series)."""

    layered: tuple[int, int] = (4, 11)  # (earlier, later)
    prose_kind: int = 2  # a prose "kind: fix." line in the first paragraph
    continued: int = 5  # What: continued on an indented line
    headerless: list[int] = field(default_factory=lambda: [9])
    knobs: int = 7
    crlf: int = 13  # 0 when the project was written with crlf=False


@dataclass
class Project:
    root: Path
    pristine: Path
    series_files: list[str]  # repo-relative, in the folder's series order
    other_files: list[str]  # the other release's series: files adopt must never touch
    quirks: Quirks
    shas: list[str]  # the fork commit each file's marker names


def _sha(n: int) -> str:
    return hashlib.sha1(f"qwen38 row {n}".encode()).hexdigest()


def _preamble(n: int, name: str, meta: dict[str, str] | None, q: Quirks) -> list[str]:
    subject = name.replace("-", " ")
    lines = [f"{subject.capitalize()} — keeps the 0.29 deployment honest.\n", "\n"]
    if n == q.prose_kind:
        lines += [
            "Found while profiling the warm-up; the scheduler read the wrong budget.\n",
            f"{PROSE_KIND}\n",
            "Until then this row carries it (see the README table).\n",
            "\n",
        ]
    else:
        lines += [f"Why: {subject} differs on our hardware; résumé in the README.\n", "\n"]
    if meta is not None:
        for key in ("Kind", "What", "Upstream", "Cut-against", "Retires-when"):
            value = meta[key]
            if key == "What" and n == q.continued:
                first, rest = value.split(": ", 1)
                lines += [f"What: {first}:\n", f"  {rest}\n"]
            else:
                lines.append(f"{key}: {value}\n")
        lines.append("\n")
    lines += [f"exported from {BRANCH} {_sha(n)}\n", "\n"]
    return lines


def write_project(
    dest: Path,
    *,
    seed: int = 29,
    crlf: bool = True,
    knob_comment: bool = True,
    root_paths: bool = False,
) -> Project:
    """Write the release and the project under ``dest``; return where everything is.
    ``root_paths``: paths under ``vllm/`` (``a/vllm/v1/...``), as this tool's own series write them."""
    top = f"{PACKAGE}/" if root_paths else ""
    b = _Builder(seed)
    rng = b.rng
    q = Quirks(crlf=13 if crlf else 0)
    py_files = sorted(p for p in b.pristine if p.endswith(".py") and b.pristine[p])
    py_files = [p for p in py_files if p != "envs.py" and not p.endswith("__init__.py")]
    patches: dict[int, bytes] = {}
    names: dict[int, str] = {}
    kinds: dict[int, str] = {}
    for n in range(1, N_ROWS + 1):
        before = {p: list(c) for p, c in b.state.items()}
        name = f"{rng.choice(_WORDS)}-{rng.choice(_WORDS)}-{n}"
        touched: list[str] = []
        if n == q.knobs:
            env = b.state["envs.py"]
            at = env.index("environment_variables: dict[str, Any] = {\n") - 1
            env[at:at] = [f"    {k}: str = ''\n" for k in RUNTIME_KNOBS]
            close = env.index("}\n")
            env[close:close] = [
                f'    "{k}": lambda: os.getenv("{k}", ""),\n' for k in RUNTIME_KNOBS
            ]
            ign = env.index("    ignored_factors = {\n") + 2
            comment = [f"        # {KNOB_REASON}\n"] if knob_comment else []
            env[ign:ign] = comment + [f'        "{k}",\n' for k in RUNTIME_KNOBS]
            touched.append("envs.py")
        elif n == q.layered[1]:
            touched.append(b.revise(n, q.layered[0]))
        else:
            for path in rng.sample(py_files, rng.randint(1, 2)):
                for _ in range(rng.randint(1, 2)):
                    b.edit(n, path)
                touched.append(path)
        diff: list[str] = []
        for path in sorted(set(touched)):
            diff += [
                f"diff --git a/{top}{path} b/{top}{path}\n",
                *_udiff(top + path, before.get(path), b.state[path]),
            ]
        kind = rng.choice(("fix", "feature", "local", "backport"))
        kinds[n] = kind
        names[n] = name
        meta: dict[str, str] | None = {
            "Kind": kind,
            "What": f"{name.replace('-', ' ')}: keep the {rng.choice(_WORDS)} budget straight",
            "Upstream": f"https://github.com/vllm-project/vllm/pull/{40000 + n}"
            if kind == "backport"
            else "none",
            "Cut-against": rng.choice((PIN, f"{PIN}, hand-resolved against #41{n:03d}")),
            "Retires-when": f"upstream carries #{40000 + n}",
        }
        if n in q.headerless:
            meta = None
        text = "".join(_preamble(n, name, meta, q) + diff)
        data = text.encode("utf-8")
        if n == q.crlf:
            data = data.replace(b"\n", b"\r\n")
        patches[n] = data

    root = dest / "project"
    pristine = dest / "pristine"
    for path, content in b.pristine.items():
        target = pristine / PACKAGE / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("".join(content), encoding="utf-8")

    # The previous release's series, for another build: adopting the new one must leave it alone.
    other_files = ["patches/series", "patches/0001-old-budget.patch", "PATCHES.md"]
    (root / "patches").mkdir(parents=True)
    (root / "patches/series").write_text("# vllm 0.28 build\n0001-old-budget.patch\n")
    (root / "patches/0001-old-budget.patch").write_text(
        "Old budget fix for 0.28.\n\n--- a/v1/x.py\n+++ b/v1/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    )
    (root / "PATCHES.md").write_text("# Patches (0.28 build)\n\nHand-written.\n")
    (root / "docker").mkdir()
    (root / "docker/requirements.txt").write_text(
        f"# the 0.28 image; the 0.29 series is checked by {FOLDER}/check_series.sh\n"
        f"vllm=={OTHER_PIN}\n"
    )

    folder = root / FOLDER
    folder.mkdir(parents=True)
    series_files: list[str] = []
    series = [
        f"# vLLM {PIN} series (qwen38). Apply in order with patch -p1 --fuzz 0 inside vllm/.\n",
        "# Regenerate with tools/export.sh; sums in SHA256SUMS.\n",
        "\n",
    ]
    sums: list[str] = []
    readme = [
        f"# vLLM {PIN} patches\n",
        "\n",
        "| # | file | kind |\n",
        "| --- | --- | --- |\n",
    ]
    for n in range(1, N_ROWS + 1):
        fname = f"{n:04d}-{names[n]}.patch"
        if n in (7, 12):
            series += ["\n", f"# --- {'knobs' if n == 7 else 'scheduler'} ---\n"]
        # quilt allows a comment after an entry; one row carries one (adopt keeps it on that line)
        note = f"  # {LINE_COMMENT}" if n == 3 else ""
        series.append(f"{fname} -p1{note}\n")
        (folder / fname).write_bytes(patches[n])
        sums.append(f"{hashlib.sha256(patches[n]).hexdigest()}  {fname}\n")
        readme.append(f"| {n} | {fname} | {kinds[n] if n not in q.headerless else '?'} |\n")
        series_files.append(f"{FOLDER}/{fname}")
    series += ["\n", f"# {SERIES_TAIL}\n"]  # comments after the last entry, kept too
    (folder / "series").write_text("".join(series))
    (folder / "SHA256SUMS").write_text("".join(sums))
    (folder / "README.md").write_text("".join(readme))
    (folder / "check_series.sh").write_text(
        "#!/usr/bin/env bash\n"
        "# Every patch of this folder, in order, on a copy of a pristine vllm tree ($1 holds vllm/):\n"
        "# git apply --check, then GNU patch at fuzz 0.\n"
        "set -euo pipefail\n"
        'here=$(cd "$(dirname "$0")" && pwd)\n'
        '(cd "$here" && sha256sum -c --quiet SHA256SUMS)\n'
        "work=$(mktemp -d); trap 'rm -rf \"$work\"' EXIT\n"
        'cp -r "$1/vllm" "$work/vllm"; cd "$work/vllm"\n'
        "grep -v '^#' \"$here/series\" | while read -r p opt; do\n"
        '  [ -n "$p" ] || continue\n'
        '  git apply --check --ignore-whitespace -p1 "$here/$p"\n'
        '  patch -p1 --fuzz 0 --batch --quiet < "$here/$p"\n'
        "done\n"
    )
    modules = folder / f"modules/{top}v1/attention/ops/qwen38"
    modules.mkdir(parents=True)
    (modules / "__init__.py").write_text('"""qwen38 ops (copied into the package)."""\n')
    (modules / "budget.py").write_text("def budget(x: int) -> int:\n    return x // 2  # ½\n")
    return Project(root, pristine, series_files, other_files, q, [_sha(n) for n in patches])


NEXT_PIN = "0.30.0"


def write_next_release(pristine: Path, dest: Path, version: str = NEXT_PIN) -> int:
    """A synthetic next release at ``dest`` (holding ``vllm/``): ``pristine`` with every module
    moved down by three lines (a header upstream added), no signature or name changed, so every row
    applies at an offset and ``port`` has nothing true to report. Returns how many modules moved."""
    import shutil

    shutil.copytree(pristine, dest)
    moved = 0
    for path in sorted((dest / PACKAGE).rglob("*.py")):
        path.write_text(f"# vllm {version}\n# (upstream moved this module)\n\n" + path.read_text())
        moved += 1
    return moved


if __name__ == "__main__":
    # python tests/seriesfolder.py DEST [--lf] [--root-paths]: --lf saves the CRLF file with LF,
    # --root-paths writes a/vllm/... paths (paths: root) instead of a/v1/... (paths: package);
    # DEST/next holds a synthetic 0.30.0 to port to.
    args = sys.argv[1:]
    if len(args) < 1 or args[0].startswith("-"):
        sys.exit("usage: python tests/seriesfolder.py DEST [--lf] [--root-paths]")
    dest = Path(args[0])
    if dest.exists() and any(dest.iterdir()):
        sys.exit(f"seriesfolder.py: {dest} is not empty; give a new directory (nothing written)")
    project = write_project(dest, crlf="--lf" not in args, root_paths="--root-paths" in args)
    write_next_release(project.pristine, dest / "next")
    print(project.root)

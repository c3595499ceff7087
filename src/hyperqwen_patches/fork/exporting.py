"""``export``: one patch file per fork commit, byte-stable, with the manifest, series and ledger updated.

A patch file is what ``git format-patch`` writes for the commit with every output-affecting option
pinned (the table :data:`FORMAT_PATCH_OPTIONS`, one comment per option saying which leak it closes).
Byte stability has three layers, because each alone was measured to leak:

1. the runner isolates the environment (no system or global config, no ``GIT_CONFIG_*``);
2. every knob is pinned again here, as a command-line option where one exists (it beats any config
   file) and as a ``-c`` override otherwise: a repository-local ``.git/config`` is read whatever the
   environment says;
3. format-patch runs in a scratch bare repository that borrows the fork's objects: the fork's
   ``info/attributes``, in-tree ``.gitattributes``, hooks and config are simply not there.

Commit SHAs stay out of the file (``--zero-commit`` writes a constant ``From 000…`` line, the base is
not named), so a rebase that keeps a commit's content keeps its file's bytes up to the ``index`` hashes
and ``@@`` numbers (positional drift).
"""

from __future__ import annotations

import base64
import json
import os
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from hyperqwen_patches import gitrun, resultcache
from hyperqwen_patches.atomicfile import write_atomic
from hyperqwen_patches.errors import FindingError, GitError, UsageError
from hyperqwen_patches.fork import reading as forkgit
from hyperqwen_patches.records import field, record
from hyperqwen_patches.series.manifest import Manifest, Row, yaml_scalar
from hyperqwen_patches.sources import basecommit

if TYPE_CHECKING:
    from hyperqwen_patches.checks.context import CheckContext, Finding

# (command-line option, config pin or None, why). One place; docs/fork.md reproduces the table.
FORMAT_PATCH_OPTIONS: tuple[tuple[str | None, tuple[str, str] | None, str], ...] = (
    ("--stdout", None, "one commit to stdout: no file names from format.outputDirectory/suffix"),
    ("--zero-commit", None, "the 'From <sha>' line carries zeros: no commit SHA in the file"),
    ("--no-numbered", ("format.numbered", "false"), "'[PATCH]', never '[PATCH n/m]'"),
    ("--subject-prefix=PATCH", ("format.subjectPrefix", "PATCH"), "format.subjectPrefix"),
    ("--no-cover-letter", ("format.coverLetter", "false"), "format.coverLetter"),
    ("--no-base", ("format.useAutoBase", "false"), "format.useAutoBase adds 'base-commit: <sha>'"),
    ("--no-to", None, "format.to adds To: headers"),
    ("--no-cc", None, "format.cc adds Cc: headers"),
    (
        "--no-add-header",
        None,
        "format.headers adds arbitrary headers (config is multi-valued: only "
        "the command line can clear it)",
    ),
    (
        "--no-encode-email-headers",
        ("format.encodeEmailHeaders", "false"),
        "RFC 2047 =?UTF-8?q?...?= encoding of non-ASCII subjects and names",
    ),
    (
        "--no-signature",
        ("format.signature", ""),
        "the '-- \\n2.39.5' trailer names the git version",
    ),
    ("--no-attach", None, "format.attach turns the patch into a MIME attachment"),
    (
        "--no-thread",
        ("format.thread", "false"),
        "format.thread adds Message-Id/In-Reply-To headers",
    ),
    (
        "--no-signoff",
        ("format.signOff", "false"),
        "format.signOff appends the user's Signed-off-by",
    ),
    ("--no-notes", ("format.notes", "false"), "format.notes appends git notes"),
    ("--no-from", ("format.from", "false"), "format.from puts the exporting user in From:"),
    ("--no-force-in-body-from", ("format.forceInBodyFrom", "false"), "an in-body From: line"),
    ("--encoding=UTF-8", ("i18n.logOutputEncoding", "UTF-8"), "message re-encoding"),
    ("--no-stat", None, "the diffstat's width and graph follow diff.statGraphWidth and COLUMNS"),
    (
        "--full-index",
        ("core.abbrev", "40"),
        "abbreviated index hashes grow with the object store: full hashes are the same everywhere",
    ),
    ("--src-prefix=a/", ("diff.noprefix", "false"), "diff.noprefix and diff.mnemonicPrefix"),
    ("--dst-prefix=b/", ("diff.mnemonicPrefix", "false"), "diff.noprefix and diff.mnemonicPrefix"),
    ("--unified=3", ("diff.context", "3"), "diff.context"),
    (
        "--inter-hunk-context=0",
        ("diff.interHunkContext", "0"),
        "diff.interHunkContext merges hunks",
    ),
    (
        "--find-renames",
        ("diff.renames", "true"),
        "diff.renames=copies or false: renames are found at git's default 50% similarity, no copies",
    ),
    ("-l1000", ("diff.renameLimit", "1000"), "diff.renameLimit"),
    ("--diff-algorithm=myers", ("diff.algorithm", "myers"), "diff.algorithm reshapes hunks"),
    (
        "--indent-heuristic",
        ("diff.indentHeuristic", "true"),
        "diff.indentHeuristic moves hunk edges",
    ),
    ("--no-relative", ("diff.relative", "false"), "diff.relative strips a subdirectory"),
    ("-O/dev/null", ("diff.orderFile", "/dev/null"), "diff.orderFile reorders the files"),
    ("--no-textconv", None, "a textconv driver from attributes rewrites the content"),
    ("--no-ext-diff", ("diff.external", ""), "diff.external runs another program"),
    ("--no-color", ("color.ui", "false"), "color.ui=always writes escape codes"),
    ("--ignore-submodules=none", None, "diff.ignoreSubmodules (gitlinks are refused anyway)"),
    (None, ("diff.suppressBlankEmpty", "false"), "an empty context line loses its leading space"),
    (None, ("core.attributesFile", "/dev/null"), "attribute drivers (binary, -diff, xfuncname)"),
    (None, ("core.quotePath", "true"), "non-ASCII path quoting"),
    (None, ("mailmap.file", "/dev/null"), "a mailmap cannot rewrite the author"),
)

PACKAGE_PREFIX = b"vllm/"

# Lines of a message body that GNU patch 2.7 would take for the start of a diff (or that make git am cut
# the message): refused at export, because the patch file would no longer apply as written.
_DIFFISH = re.compile(
    rb"^(--- |\+\+\+ |\*\*\* |diff --git |diff -[a-zA-Z]|Index: |@@ -|\*{15}|Binary files |GIT binary patch|---$)"
)


def format_patch_argv(sha: str, *, relative: str | None = None) -> list[str]:
    """The pinned argv; ``relative`` (``"vllm/"``) writes paths relative to the package directory,
    for a ``paths: package`` series (``a/v1/...``): git's own ``--relative`` in place of
    ``--no-relative``, so the bytes stay exactly what format-patch writes (the fork keeps the
    package under ``vllm/``; :func:`refusals` has already refused any change outside it)."""
    args = ["format-patch"]
    for opt, _pin, _why in FORMAT_PATCH_OPTIONS:
        if opt == "--no-relative" and relative is not None:
            opt = f"--relative={relative}"
        if opt is not None:
            args.append(opt)
    args += ["-1", sha]
    return args


def format_patch_config() -> list[tuple[str, str]]:
    return [pin for _opt, pin, _why in FORMAT_PATCH_OPTIONS if pin is not None]


def format_commit(view: Path, sha: str, *, relative: str | None = None) -> bytes:
    """The pinned ``git format-patch`` of one commit, run in ``view`` (a scratch repository)."""
    return gitrun.check(
        format_patch_argv(sha, relative=relative),
        git_dir=view,
        config=format_patch_config(),
        what=f"exporting {sha[:12]}",
    )


def diffish_lines(message: bytes) -> list[tuple[int, bytes]]:
    """(line number in the message, line) of every body line that reads as the start of a diff."""
    lines = message.split(b"\n")
    return [(n, line) for n, line in enumerate(lines, start=1) if n > 1 and _DIFFISH.match(line)]


def refusals(
    git_dir: Path,
    commit: forkgit.ForkCommit,
    *,
    module: bool = False,
    binary: Sequence[bytes] | None = None,
) -> list[str]:
    """Everything that makes ``commit`` unexportable (empty when it exports).

    ``binary``: the commit's binary paths when the caller has them (:func:`binary_paths_of`)."""
    problems: list[str] = []
    if len(commit.parents) != 1:
        problems.append(
            f"a merge commit ({len(commit.parents)} parents): an export point must be linear; "
            "rebase it (git rebase --rebase-merges is not supported)"
        )
        return problems
    if not commit.changes:
        problems.append("an empty commit: it carries no change for the series to apply")
    for change in commit.changes:
        for path in (change.old_path, change.new_path):
            if path is not None and not path.startswith(PACKAGE_PREFIX):
                problems.append(
                    f"touches {path.decode('utf-8', 'backslashreplace')}, outside vllm/: the series "
                    "patches the vllm package only; move that change to another commit off the "
                    "export point"
                )
        if "160000" in (change.old_mode, change.new_mode):
            problems.append(
                "adds or changes a submodule (gitlink): not a file the series can carry"
            )
        if "120000" in (change.old_mode, change.new_mode):
            problems.append(
                f"{(change.new_path or change.old_path or b'').decode('utf-8', 'backslashreplace')}: "
                "a symbolic link: GNU patch cannot create it"
            )
    for path in binary if binary is not None else binary_paths(git_dir, commit):
        problems.append(
            f"{path.decode('utf-8', 'backslashreplace')}: a binary change; GNU patch cannot apply "
            "it (ship binaries outside the series)"
        )
    for n, line in diffish_lines(commit.message):
        problems.append(
            f"message line {n} {line.decode('utf-8', 'backslashreplace')!r} reads as the start of a "
            "diff to GNU patch (or ends the message for git am); reword it (indent it, for example)"
        )
    if module:
        for change in commit.changes:
            if change.status != "A":
                problems.append(
                    f"{(change.old_path or change.new_path or b'').decode('utf-8', 'backslashreplace')}: "
                    f"a module-file row's commit may only add files (status {change.status})"
                )
    return problems


# Bump when what a cached export result (format-patch output, binary paths) means changes.
RESULT_VERSION = "1"
_NUMSTAT_CONFIG = (("core.attributesFile", "/dev/null"),)
NUMSTAT_ARGS = (
    "diff-tree",
    "-r",
    "-z",
    "--numstat",
    "--no-renames",
    "--no-textconv",
    "--no-ext-diff",
)


def binary_paths(git_dir: Path, commit: forkgit.ForkCommit) -> list[bytes]:
    """Paths git itself sees as binary in this commit (by content: no attributes apply here)."""
    out = gitrun.check(
        [*NUMSTAT_ARGS, commit.parents[0], commit.sha],
        git_dir=git_dir,
        config=_NUMSTAT_CONFIG,
        what=f"checking {commit.sha[:12]} for binary changes",
    )
    return [r[4:] for r in out.split(b"\0") if r.startswith(b"-\t-\t")]


def binary_paths_of(
    git_dir: Path, commits: Sequence[forkgit.ForkCommit], *, scratch: bool = False
) -> dict[str, list[bytes]]:
    """:func:`binary_paths` of every single-parent commit, from one ``diff-tree --stdin`` (one git
    process per export point instead of one per commit).

    With ``scratch`` (``git_dir`` is a :func:`forkgit.scratch_repo`: no config, no attributes of its
    own) the answer is pure in the commits (a SHA names a commit's whole content and its parent),
    git's version and the pinned arguments, and comes from the result cache when seen before. A
    user's repository can change it (``info/attributes``), so there it is always computed.
    """
    shas = [c.sha for c in commits if len(c.parents) == 1]
    if not shas:
        return {}

    def compute() -> dict[str, list[str]]:
        out = gitrun.check(
            [*NUMSTAT_ARGS, "--stdin", "--always"],
            git_dir=git_dir,
            config=_NUMSTAT_CONFIG,
            input="".join(f"{sha}\n" for sha in shas).encode(),
            what=f"checking {len(shas)} commits for binary changes",
        )
        found: dict[str, list[str]] = {}
        current: list[str] = []
        # Each commit's output is its SHA (a record without a tab), then "added\tdeleted\tpath" records.
        for item in out.split(b"\0"):
            if not item:
                continue
            if b"\t" not in item:
                current = found.setdefault(item.decode(), [])
            elif item.startswith(b"-\t-\t"):
                current.append(_b64(item[4:]))
        missing = set(shas) - set(found)
        if missing:
            raise GitError(f"git diff-tree --stdin did not report {sorted(missing)[0][:12]}")
        return found

    found = _cached_in_scratch(
        scratch,
        "binary-paths",
        [" ".join(NUMSTAT_ARGS), repr(_NUMSTAT_CONFIG), *shas],
        compute,
    )
    return {sha: [base64.b64decode(p) for p in paths] for sha, paths in found.items()}


def format_commits(
    view: Path,
    commits: Sequence[forkgit.ForkCommit],
    *,
    scratch: bool = False,
    relative: str | None = None,
) -> dict[str, bytes]:
    """:func:`format_commit` of each commit of a linear chain, from one ``git format-patch``.

    The same pinned options, written one file per commit (``-o`` with ``--numbered-files`` instead of
    ``--stdout``: files need no splitting, and a message cannot fake a boundary), so each file is byte
    for byte what ``format_commit`` prints (tests/test_export_pinned.py compares them). One process
    per export point instead of one per commit. With ``scratch`` (``view`` is a
    :func:`forkgit.scratch_repo`, with no config or attributes of its own) the output is pure in the
    chain's SHAs, git's version and the pinned options and config, which make the key of the result
    cache, so a warm run starts no git at all; in a user's repository its attributes can change the
    bytes (tests/test_batched_git.py), so there it is always computed. Anything but a linear chain
    falls back to one call each.
    """
    chain = [c.sha for c in commits]
    linear = all(len(c.parents) == 1 for c in commits) and all(
        commits[i].parents[0] == chain[i - 1] for i in range(1, len(commits))
    )
    if len(commits) < 2 or not linear:
        return {c.sha: format_commit(view, c.sha, relative=relative) for c in commits}
    args = [a for a in format_patch_argv(chain[-1], relative=relative) if a != "--stdout"][:-2]
    span = f"{commits[0].parents[0]}..{chain[-1]}"

    def compute() -> list[str]:
        with tempfile.TemporaryDirectory(prefix="hqp-format-patch-") as tmp:
            gitrun.check(
                [*args, "-o", tmp, "--numbered-files", "--start-number=1", span],
                git_dir=view,
                config=format_patch_config(),
                what=f"exporting {len(chain)} commits",
            )
            files = sorted(Path(tmp).iterdir(), key=lambda p: int(p.name))
            if len(files) != len(chain):
                raise GitError(
                    f"git format-patch wrote {len(files)} files for {len(chain)} commits",
                    hint="rerun with -v to see the git command",
                )
            return [_b64(f.read_bytes()) for f in files]

    texts = _cached_in_scratch(
        scratch,
        "format-patch",
        [" ".join(args), repr(format_patch_config()), span, *chain],
        compute,
    )
    return {sha: base64.b64decode(t) for sha, t in zip(chain, texts, strict=True)}


def _cached_in_scratch(
    scratch: bool, name: str, parts: list[str], compute: Callable[[], Any]
) -> Any:
    """``compute()``, through the result cache when it runs in a scratch view of our own (where its
    output is pure in ``git --version`` and ``parts``); always computed in anyone else's repository."""
    if not scratch:
        return compute()
    return resultcache.cached(name, RESULT_VERSION, [gitrun.version(), *parts], compute)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def export_commits(
    git_dir: Path,
    commits: Sequence[forkgit.ForkCommit],
    *,
    module_rows: frozenset[str] = frozenset(),
    relative: str | None = None,
) -> dict[str, bytes | dict[bytes, bytes]]:
    """sha -> patch bytes (or, for a module-file row's commit, path -> file bytes) for every commit.

    ``relative``: see :func:`format_patch_argv` (``patch_relative`` of the manifest).

    Every refusal of every commit is collected before anything is raised, so one run names them all.
    """
    result: dict[str, bytes | dict[bytes, bytes]] = {}
    # Everything runs in a scratch view of the fork's objects: the fork's attributes and config cannot
    # change binary detection or the bytes written.
    with forkgit.scratch_repo(borrow=git_dir) as view:
        problems: list[str] = []
        binary = binary_paths_of(view, commits, scratch=True)
        for commit in commits:
            refused = refusals(
                view, commit, module=commit.row in module_rows, binary=binary.get(commit.sha, [])
            )
            for problem in refused:
                problems.append(f"{commit.sha[:12]} {commit.subject!r}: {problem}")
        if problems:
            raise FindingError(
                f"{len(problems)} problem(s) make the export point unexportable:\n  "
                + "\n  ".join(problems),
                hint="fix the commits on the export point and run export again",
            )
        blobs = forkgit.read_objects(
            view,
            sorted(
                {
                    c.new_sha
                    for commit in commits
                    if commit.row in module_rows
                    for c in commit.changes
                    if c.new_path is not None
                }
            ),
            kind="blob",
        )
        formatted = format_commits(view, commits, scratch=True, relative=relative)
        for commit in commits:
            if commit.row in module_rows:
                result[commit.sha] = {
                    c.new_path: blobs[c.new_sha] for c in commit.changes if c.new_path is not None
                }
            else:
                result[commit.sha] = formatted[commit.sha]
    return result


# --- the export operation: fork → patch files, manifest SHAs, series and ledger ------------------------

# "format": the same changes written another way (a hand-kept preamble, context, hunk split):
# what the first export after `adopt` finds on files the project wrote by hand.
Drift = Literal[
    "unchanged", "new", "removed", "positional", "format", "semantic", "rendered", "manifest"
]


@record(frozen=True)
class FileChange:
    """One repository file export would write (``new``) or remove (``new`` None)."""

    path: str  # repo-relative POSIX path
    row: str  # the row it belongs to ("" for the manifest and the rendered files)
    old: bytes | None
    new: bytes | None
    drift: Drift


@record
class ExportPlan:
    """What export would do; ``write_export`` does it, ``export --check`` reports it."""

    root: Path
    changes: list[FileChange] = field(default_factory=list)
    added_rows: list[str] = field(default_factory=list)
    vanished_rows: list[str] = field(default_factory=list)
    commit_updates: dict[str, str] = field(default_factory=dict)  # row -> new commit SHA
    point_of: dict[str, str] = field(default_factory=dict)  # row without export_point -> its point
    point_updates: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (base, tip)

    @property
    def semantic(self) -> list[FileChange]:
        return [c for c in self.changes if c.drift in ("new", "removed", "semantic")]

    @property
    def positional(self) -> list[FileChange]:
        return [c for c in self.changes if c.drift == "positional"]

    @property
    def format_only(self) -> list[FileChange]:
        return [c for c in self.changes if c.drift == "format"]

    @property
    def up_to_date(self) -> bool:
        return not self.changes and not self.added_rows

    def to_json(self) -> dict[str, Any]:
        return {
            "root": str(self.root),
            "up_to_date": self.up_to_date,
            "semantic_drift": bool(self.semantic or self.added_rows),
            "changes": [{"path": c.path, "row": c.row, "drift": c.drift} for c in self.changes],
            "added_rows": self.added_rows,
            "vanished_rows": self.vanished_rows,
            "commit_updates": dict(sorted(self.commit_updates.items())),
            "export_points": {
                k: {"base": b, "commit": t} for k, (b, t) in sorted(self.point_updates.items())
            },
        }


def classify(old: bytes | None, new: bytes | None) -> Drift:
    """unchanged / new / removed / positional (only ``index`` hashes and ``@@`` numbers moved) /
    format (the same removed and added lines of the same files, written another way: preamble,
    context, hunk split) / semantic; the one definition of positional drift is
    ``seriesdiff.fold_positional``, of format drift ``rangediff.changes_of``."""
    from hyperqwen_patches.series.rangediff import changes_of, fold_positional

    if old == new:
        return "unchanged"
    if old is None:
        return "new"
    if new is None:
        return "removed"
    if fold_positional(old) == fold_positional(new):
        return "positional"
    same = changes_of(old)
    return "format" if same is not None and same == changes_of(new) else "semantic"


def find_base(git_dir: Path, tip: str, *, package: str, pin: str, branch: str) -> str:
    """The export point's base: its one root commit, which must be the pristine commit of the pin."""
    out = gitrun.check(
        ["rev-list", "--max-parents=0", tip], git_dir=git_dir, what=f"finding the base of {branch}"
    )
    roots = out.decode().split()
    if len(roots) != 1:
        raise FindingError(
            f"export point {branch} has {len(roots)} root commits; it must grow from one base commit",
        )
    _tree, _parents, message = forkgit.read_commit(git_dir, roots[0])
    if message != basecommit.base_message(package, pin):
        first = message.split(b"\n", 1)[0].decode("utf-8", "backslashreplace")
        raise FindingError(
            f"export point {branch} is not built on the {package} {pin} base commit (its root "
            f"{roots[0][:12]} says {first!r})",
            hint="import the series to build the base (docs/fork.md), then rebase the fork onto it",
        )
    return roots[0]


_SLUG = re.compile(r"[^a-z0-9._-]+")


def slug(subject: str, taken: set[str]) -> str:
    base = _SLUG.sub("-", subject.lower()).strip("-._")[:48].rstrip("-._") or "commit"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    return name


def _module_target(row_files: str, tree_path: bytes, manifest: Manifest) -> str:
    rel = tree_path
    if manifest.paths == "package":
        rel = tree_path.removeprefix(manifest.package.encode() + b"/")
    return f"{row_files.rstrip('/')}/{os.fsdecode(rel)}"


def _read(root: Path, rel: str) -> bytes | None:
    try:
        return (root / rel).read_bytes()
    except FileNotFoundError:
        return None


def patch_relative(manifest: Manifest) -> str | None:
    """The directory patch paths are relative to inside the fork's tree: ``"vllm/"`` for a
    ``paths: package`` series, None (the tree's root) for ``paths: root``."""
    return f"{manifest.package}/" if manifest.paths == "package" else None


def plan_export(manifest: Manifest, fork: Path, *, export_points: Sequence[str] = ()) -> ExportPlan:
    """Everything export would change in the repository, computed without writing."""

    if not manifest.export_points:
        raise UsageError(
            f"{manifest.path}: the manifest names no export point",
            hint="add export_points: [{name: ..., branch: ...}] (docs/manifest.md)",
        )
    points = [p for p in manifest.export_points if not export_points or p.name in export_points]
    unknown = set(export_points) - {p.name for p in manifest.export_points}
    if unknown:
        raise UsageError(f"unknown export point(s): {', '.join(sorted(unknown))}")
    if not fork.exists():
        raise UsageError(f"--fork {fork}: no such repository")
    git_dir = gitrun.git_dir_of(fork)
    tips: dict[str, str] = {}
    for point in points:
        tip = forkgit.resolve(git_dir, f"refs/heads/{point.branch}", what="export")
        if tip is None:
            raise GitError(f"{fork}: the export point branch {point.branch!r} does not exist")
        tips[point.name] = tip
    return plan_export_at(manifest, git_dir, tips)


def plan_export_at(
    manifest: Manifest,
    git_dir: Path,
    tips: Mapping[str, str],
    *,
    manifest_text: bytes | None = None,
) -> ExportPlan:
    """:func:`plan_export` for export points already resolved to tips in ``git_dir`` (``check`` reads a
    bundle or URL fork from a scratch repository this way). ``manifest_text``: the manifest's new text
    when a row command (``drop``, ``move``, ``rename``) changed it; ``manifest`` is then its parse, and
    the plan writes it over the file on disk."""
    from hyperqwen_patches.fork import replay

    root = manifest.root
    plan = ExportPlan(root)
    first = manifest.export_points[0].name
    taken = {r.name for r in manifest.rows}
    new_rows: list[dict[str, str]] = []
    for point in manifest.export_points:
        if point.name not in tips:
            continue
        tip = tips[point.name]
        base = find_base(
            git_dir, tip, package=manifest.package, pin=manifest.pin, branch=point.branch
        )
        plan.point_updates[point.name] = (base, tip)
        commits = forkgit.list_commits(git_dir, base, tip)
        rows = [
            r for r in manifest.rows if (r.export_point or first) == point.name and r.skip is None
        ]
        matching = replay.match_rows(
            [(r.name, r.commit) for r in rows], commits, replay.other_rows(manifest, point.name)
        )
        if matching.misplaced:
            name, commit, why = matching.misplaced[0]
            raise FindingError(
                f"fork commit {commit.sha[:12]} {commit.subject!r} on {point.branch} carries row "
                f"{name}, which is {why}",
                hint="drop the commit from the export point, or change the row in the manifest",
            )
        if matching.duplicate:
            name, commit = matching.duplicate[0]
            raise FindingError(
                f"row {name} is named by more than one commit (also {commit.sha[:12]})"
            )
        plan.vanished_rows += matching.vanished_rows
        by_name = {r.name: r for r in rows}
        module_rows = frozenset(n for n in by_name if by_name[n].is_module)
        exported = export_commits(
            git_dir, commits, module_rows=module_rows, relative=patch_relative(manifest)
        )
        paired = {c.sha: n for n, c in matching.pairs}
        added = {c.sha: n for n, c in matching.missing_rows}
        for commit in commits:
            if commit.sha in paired:
                name = paired[commit.sha]
                row = by_name[name]
                if row.commit != commit.sha:
                    plan.commit_updates[name] = commit.sha
                if row.export_point is None:
                    plan.point_of[name] = point.name  # a row with a commit names its export point
            else:
                name = added.get(commit.sha) or slug(commit.subject, taken)
                taken.add(name)
                row = None
                plan.added_rows.append(name)
                new_rows.append(
                    {
                        "name": name,
                        "kind": "local",
                        "what": f"TODO: describe (added by export from {commit.subject})",
                        "patch": f"patches/{name}.patch",
                        "cut_against": manifest.pin,
                        "retires_when": "TODO",
                        "export_point": point.name,
                        "commit": commit.sha,
                    }
                )
            content = exported[commit.sha]
            if isinstance(content, dict):
                assert row is not None and row.files is not None
                wanted = {_module_target(row.files, p, manifest): d for p, d in content.items()}
                on_disk = _module_files_on_disk(root, row)
                for rel in sorted(set(wanted) | set(on_disk)):
                    old, new = on_disk.get(rel), wanted.get(rel)
                    drift = classify(old, new)
                    if drift != "unchanged":
                        plan.changes.append(FileChange(rel, name, old, new, drift))
            else:
                rel = row.patch if row is not None and row.patch else f"patches/{name}.patch"
                old = _read(root, rel)
                drift = classify(old, content)
                if drift != "unchanged":
                    plan.changes.append(FileChange(rel, name, old, content, drift))
    # The manifest (targeted text edits) and what render writes from the edited manifest.
    from hyperqwen_patches.series.manifest import parse_manifest
    from hyperqwen_patches.series.render import render

    disk_text = manifest.path.read_bytes()
    old_text = disk_text if manifest_text is None else manifest_text
    new_text = edit_manifest(old_text, plan, new_rows)
    if new_text != disk_text:
        plan.changes.append(
            FileChange(_rel(manifest.path, root), "", disk_text, new_text, "manifest")
        )
    edited = parse_manifest(new_text, path=manifest.path, root=root)
    pending = {c.path: c.new for c in plan.changes if c.new is not None}
    for rel, data in render(edited, pending).items():
        old = _read(root, rel)
        if old != data:
            plan.changes.append(FileChange(rel, "", old, data, "rendered"))
    return plan


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def _module_files_on_disk(root: Path, row: Row) -> dict[str, bytes]:
    """The files a module row's directory holds now, by repository path.

    The directory must be the repository's own (``rows.inside_repository``): one linked elsewhere
    was walked, and the outside files' names printed as "removed". Inside it, a link or a file that
    is not a regular file (a FIFO would wait forever) is refused by name, as building the row does."""
    from hyperqwen_patches.inputfile import read_repo_file
    from hyperqwen_patches.series.rows import (
        IGNORED_DIRS,
        IGNORED_SUFFIXES,
        RowError,
        inside_repository,
    )

    assert row.files is not None
    base = root / row.files
    out: dict[str, bytes] = {}
    if not base.is_dir():
        return out
    inside_repository(root, base, row)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = [d for d in dirnames if os.fsencode(d) not in IGNORED_DIRS]
        for name in [*dirnames, *filenames]:
            full = Path(dirpath) / name
            if full.is_symlink():
                raise RowError(
                    row,
                    f"{full.relative_to(root).as_posix()} is a symbolic link; module files "
                    "must be plain files",
                )
        for name in filenames:
            if os.fsencode(name).endswith(IGNORED_SUFFIXES):
                continue
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            try:
                out[rel] = read_repo_file(full, "module file", shown=rel)
            except (ValueError, FileNotFoundError) as exc:
                raise RowError(row, str(exc)) from None
    return out


def write_export(plan: ExportPlan) -> list[str]:
    """Write the plan: every file through a temporary file and a rename; return the paths written."""
    written: list[str] = []
    for change in plan.changes:
        target = plan.root / change.path
        if change.new is None:
            target.unlink(missing_ok=True)
        else:
            write_atomic(target, change.new)
        written.append(change.path)
    return written


# --- targeted edits of the manifest's text (its comments and formatting are kept) ---------------------


# The keys of a row this tool writes into the manifest, in docs/manifest.md's order.
NEW_ROW_KEYS = (
    "name",
    "kind",
    "what",
    "patch",
    "cut_against",
    "retires_when",
    "export_point",
    "commit",
)


def insert_row(text: bytes, after: str, row: Mapping[str, str]) -> bytes:
    """The manifest's text with ``row`` written right after the row named ``after`` (block style, in
    the rows' own indentation); every other byte is kept."""
    import yaml

    source = text.decode("utf-8")
    top = yaml.compose(source, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    rows_node = next((v for k, v in top.value if k.value == "rows"), None)
    if rows_node is None or rows_node.flow_style:
        raise UsageError(
            "the manifest's rows are not a block list; add the row by hand (docs/manifest.md)"
        )
    for item in rows_node.value:
        name = next((v for k, v in item.value if k.value == "name"), None)
        if name is None or name.value != after or item.flow_style:
            continue
        dash_col = rows_node.start_mark.column
        key_col = item.start_mark.column
        keys = [k for k in NEW_ROW_KEYS if k in row]
        lines = [f"{' ' * dash_col}- {keys[0]}: {yaml_scalar(row[keys[0]])}"]
        lines += [f"{' ' * key_col}{k}: {yaml_scalar(row[k])}" for k in keys[1:]]
        end = item.value[-1][
            1
        ].end_mark.index  # the last value (the mapping's mark is the next item's)
        if end > 0 and source[end - 1] == "\n":  # a block scalar ends at the next line's start
            at, block = end, "\n".join(lines) + "\n"
        else:
            line_end = source.find("\n", end)
            at = len(source) if line_end < 0 else line_end
            block = "".join("\n" + line for line in lines)
        return (source[:at] + block + source[at:]).encode("utf-8")
    raise UsageError(f"no row {after!r} written in block style in the manifest")


def edit_manifest(text: bytes, plan: ExportPlan, new_rows: Sequence[Mapping[str, str]]) -> bytes:
    """Set rows' and export points' ``commit:`` (and points' ``base:``) and append new rows, editing only
    those scalars in the text (re-dumping the YAML would lose comments, order and quoting)."""
    import yaml

    source = text.decode("utf-8")
    # libyaml when present (as manifest.py reads it): the pure-Python composer took a second for a
    # 1,000-row manifest; both give the same marks (character offsets) for a str.
    top = yaml.compose(source, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement) in character offsets

    inserts: dict[int, tuple[yaml.MappingNode, dict[str, str]]] = {}  # id(node) -> new keys

    def set_key(node: yaml.MappingNode, key: str, value: str) -> None:
        for k, v in node.value:
            if k.value == key:
                quoted = v.style in ('"', "'")
                text_value = json.dumps(value) if quoted else yaml_scalar(value)
                edits.append((v.start_mark.index, v.end_mark.index, text_value))
                return
        inserts.setdefault(id(node), (node, {}))[1][key] = value

    def flush_inserts() -> None:
        """New keys go after the mapping's last line, in docs/manifest.md's order."""
        order = ("export_point", "commit", "base")
        for node, keys in inserts.values():
            column = node.value[0][0].start_mark.column
            lines = [f"{' ' * column}{k}: {yaml_scalar(keys[k])}" for k in order if k in keys]
            end = node.value[-1][1].end_mark.index
            if end > 0 and source[end - 1] == "\n":  # a block scalar ends at the next line's start
                edits.append((end, end, "\n".join(lines) + "\n"))
            else:
                line_end = source.find("\n", end)
                line_end = len(source) if line_end < 0 else line_end
                edits.append((line_end, line_end, "".join("\n" + line for line in lines)))

    def get(node: yaml.MappingNode, key: str) -> yaml.Node | None:
        return next((v for k, v in node.value if k.value == key), None)

    rows_node = get(top, "rows")
    points_node = get(top, "export_points")
    if points_node is not None:
        for item in points_node.value:
            name = get(item, "name")
            if name is not None and name.value in plan.point_updates:
                base, tip = plan.point_updates[name.value]
                current_commit = get(item, "commit")
                current_base = get(item, "base")
                if current_commit is None or current_commit.value != tip:
                    set_key(item, "commit", tip)
                if current_base is None or current_base.value != base:
                    set_key(item, "base", base)
    if rows_node is not None:
        for item in rows_node.value:
            name = get(item, "name")
            if name is not None and name.value in plan.commit_updates:
                set_key(item, "commit", plan.commit_updates[name.value])
            if (
                name is not None
                and name.value in plan.point_of
                and get(item, "export_point") is None
            ):
                set_key(item, "export_point", plan.point_of[name.value])
    if new_rows and rows_node is not None:
        keys = NEW_ROW_KEYS
        if rows_node.flow_style or not rows_node.value:
            column = rows_node.start_mark.column if rows_node.value else 0
            dash = " " * 2
            lines = []
            for row in new_rows:
                lines.append(f"{dash}- {keys[0]}: {yaml_scalar(row[keys[0]])}")
                lines += [f"{dash}  {k}: {yaml_scalar(row[k])}" for k in keys[1:]]
            del column
            start = rows_node.start_mark.index
            while start > 0 and source[start - 1] == " ":  # "rows: []" becomes "rows:" + block
                start -= 1
            edits.append((start, rows_node.end_mark.index, "\n" + "\n".join(lines)))
        else:
            dash_col = rows_node.start_mark.column
            key_col = rows_node.value[0].start_mark.column
            lines = []
            for row in new_rows:
                lines.append(f"{' ' * dash_col}- {keys[0]}: {yaml_scalar(row[keys[0]])}")
                lines += [f"{' ' * key_col}{k}: {yaml_scalar(row[k])}" for k in keys[1:]]
            at = rows_node.end_mark.index
            prefix = "" if at == 0 or source[at - 1] == "\n" else "\n"
            edits.append((at, at, prefix + "\n".join(lines) + "\n"))
    flush_inserts()
    for start, end, replacement in sorted(edits, reverse=True):
        source = source[:start] + replacement + source[end:]
    return source.encode("utf-8")


# --- check: rows export added stay flagged until a person fills them in -------------------------------

TODO_MARK = "TODO"


def check_unfilled_rows(ctx: CheckContext) -> list[Finding]:
    """A row whose ``what`` or ``retires_when`` still starts with TODO (as export adds new rows) fails."""
    from hyperqwen_patches.checks.context import Finding

    findings: list[Finding] = []
    for row in ctx.manifest.rows:
        if row.unset:
            findings.append(
                Finding(
                    "unfilled-rows",
                    "warning",
                    row.name,
                    f"row {row.name} was adopted without header lines for {', '.join(row.unset)}; "
                    f"defaults stand in for them: fill them in and drop `unset` "
                    f"({row.source_path}, manifest line {row.line})",
                )
            )
        empty = [
            f for f in ("what", "retires_when") if getattr(row, f).strip().startswith(TODO_MARK)
        ]
        if empty:
            findings.append(
                Finding(
                    "unfilled-rows",
                    "error",
                    row.name,
                    f"row {row.name} was added by export and its {', '.join(empty)} still say "
                    f"{TODO_MARK}; describe it in the manifest (line {row.line})",
                )
            )
    return findings


# --- the shipped bundle: the fork's export points, with the base commit as prerequisite ----------------

BUNDLE_RELPATH = "patches/fork.bundle"


def write_bundle(plan: ExportPlan, fork: Path, manifest: Manifest) -> str:
    """Write ``patches/fork.bundle``: ``base..branch`` of every exported point, so that the bundle's only
    prerequisite is the deterministic base commit (anyone can rebuild it from PyPI with ``import``)."""
    git_dir = gitrun.git_dir_of(fork)
    args = ["bundle", "create", "--quiet", "--version=2"]
    target = manifest.root / BUNDLE_RELPATH
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    refs: list[str] = []
    for point in manifest.export_points:
        if point.name in plan.point_updates:
            base, _tip = plan.point_updates[point.name]
            refs += [f"refs/heads/{point.branch}", f"^{base}"]
    if not refs:
        raise UsageError("no export point to bundle")
    gitrun.check(
        [*args, str(tmp), *refs],
        git_dir=git_dir,
        # One pack thread makes the delta search deterministic, and the pack knobs a repository config
        # may set are pinned, so the same fork repository gives the same file. (Deltas already stored
        # in the fork's packs are reused, so a repacked fork may give other bytes, same objects.)
        config=(
            ("pack.threads", "1"),
            ("pack.window", "10"),
            ("pack.depth", "50"),
            ("pack.compression", "-1"),
            ("core.compression", "-1"),
            ("pack.useBitmaps", "false"),
        ),
        what="writing the fork bundle",
    )
    os.replace(tmp, target)
    return BUNDLE_RELPATH

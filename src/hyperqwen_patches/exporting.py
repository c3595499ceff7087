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

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hyperqwen_patches import forkgit, gitrun
from hyperqwen_patches.errors import FindingError, UsageError

# (command-line option, config pin or None, why). One place; docs/fork.md reproduces the table.
FORMAT_PATCH_OPTIONS: tuple[tuple[str, tuple[str, str] | None, str], ...] = (
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
    (None, ("diff.suppressBlankEmpty", "false"), "an empty context line loses its leading space"),  # type: ignore[arg-type]
    (None, ("core.attributesFile", "/dev/null"), "attribute drivers (binary, -diff, xfuncname)"),  # type: ignore[arg-type]
    (None, ("core.quotePath", "true"), "non-ASCII path quoting"),  # type: ignore[arg-type]
    (None, ("mailmap.file", "/dev/null"), "a mailmap cannot rewrite the author"),  # type: ignore[arg-type]
)

PACKAGE_PREFIX = b"vllm/"

# Lines of a message body that GNU patch 2.7 would take for the start of a diff (or that make git am cut
# the message): refused at export, because the patch file would no longer apply as written.
_DIFFISH = re.compile(
    rb"^(--- |\+\+\+ |\*\*\* |diff |Index: |@@ -|\*{15}|Binary files |GIT binary patch|---$)"
)


@dataclass(frozen=True)
class ExportRefusal:
    """Why a commit cannot be exported, with what to do about it."""

    sha: str
    subject: str
    message: str


def format_patch_argv(sha: str) -> list[str]:
    args = ["format-patch"]
    args += [opt for opt, _pin, _why in FORMAT_PATCH_OPTIONS if opt is not None]
    args += ["-1", sha]
    return args


def format_patch_config() -> list[tuple[str, str]]:
    return [pin for _opt, pin, _why in FORMAT_PATCH_OPTIONS if pin is not None]


def format_commit(view: Path, sha: str) -> bytes:
    """The pinned ``git format-patch`` of one commit, run in ``view`` (a scratch repository)."""
    return gitrun.check(
        format_patch_argv(sha),
        git_dir=view,
        config=format_patch_config(),
        what=f"exporting {sha[:12]}",
    )


def diffish_lines(message: bytes) -> list[tuple[int, bytes]]:
    """(line number in the message, line) of every body line that reads as the start of a diff."""
    lines = message.split(b"\n")
    return [(n, line) for n, line in enumerate(lines, start=1) if n > 1 and _DIFFISH.match(line)]


def refusals(git_dir: Path, commit: forkgit.ForkCommit, *, module: bool = False) -> list[str]:
    """Everything that makes ``commit`` unexportable (empty when it exports)."""
    problems: list[str] = []
    if len(commit.parents) != 1:
        problems.append(
            f"a merge commit ({len(commit.parents)} parents): an export point must be linear; "
            "rebase it (git rebase --rebase-merges is not supported)"
        )
        return problems
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
    for path in binary_paths(git_dir, commit):
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


def binary_paths(git_dir: Path, commit: forkgit.ForkCommit) -> list[bytes]:
    """Paths git itself sees as binary in this commit (by content: no attributes apply here)."""
    out = gitrun.check(
        [
            "diff-tree",
            "-r",
            "-z",
            "--numstat",
            "--no-renames",
            "--no-textconv",
            "--no-ext-diff",
            commit.parents[0],
            commit.sha,
        ],
        git_dir=git_dir,
        config=(("core.attributesFile", "/dev/null"),),
        what=f"checking {commit.sha[:12]} for binary changes",
    )
    paths = []
    for record in out.split(b"\0"):
        if record.startswith(b"-\t-\t"):
            paths.append(record[4:])
    return paths


def export_commits(
    git_dir: Path,
    commits: Sequence[forkgit.ForkCommit],
    *,
    module_rows: frozenset[str] = frozenset(),
) -> dict[str, bytes | dict[bytes, bytes]]:
    """sha -> patch bytes (or, for a module-file row's commit, path -> file bytes) for every commit.

    Every refusal of every commit is collected before anything is raised, so one run names them all.
    """
    result: dict[str, bytes | dict[bytes, bytes]] = {}
    # Everything runs in a scratch view of the fork's objects: the fork's attributes and config cannot
    # change binary detection or the bytes written.
    with forkgit.scratch_repo(borrow=git_dir) as view:
        problems: list[str] = []
        for commit in commits:
            for problem in refusals(view, commit, module=commit.row in module_rows):
                problems.append(f"{commit.sha[:12]} {commit.subject!r}: {problem}")
        if problems:
            raise FindingError(
                f"{len(problems)} problem(s) make the export point unexportable:\n  "
                + "\n  ".join(problems),
                hint="fix the commits on the export point and run export again",
            )
        for commit in commits:
            if commit.row in module_rows:
                result[commit.sha] = {
                    c.new_path: forkgit.read_blob(view, c.new_sha)
                    for c in commit.changes
                    if c.new_path is not None
                }
            else:
                result[commit.sha] = format_commit(view, commit.sha)
    return result


def check_message_encoding(message: bytes, where: str) -> None:
    try:
        message.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{where}: the commit message is not UTF-8 ({exc})") from exc

"""The pinned ``git format-patch``: what makes one patch file per fork commit byte-stable.

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

from pathlib import Path

from hyperqwen_patches import gitrun

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


def format_patch_argv(sha: str, *, relative: str | None = None) -> list[str]:
    """The pinned argv; ``relative`` (``"vllm/"``) writes paths relative to the package directory,
    for a ``paths: package`` series (``a/v1/...``): git's own ``--relative`` in place of
    ``--no-relative``, so the bytes stay exactly what format-patch writes (the fork keeps the
    package under ``vllm/``; ``refusals.refusals`` has already refused any change outside it)."""
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

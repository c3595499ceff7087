"""A hostile fixture repository, built from scratch with plain ``git`` (not through the tool's runner).

Hostile on purpose (git-filter-repo forces non-Unicode paths through its tests): the pristine tree holds a
Latin-1 file, a CRLF file and a file without a final newline, and the fork's commits change a file mode,
rename a file, edit the CRLF and Latin-1 files byte for byte and drop a final newline. Each fork commit
carries the ``Hqp-Row: <name>`` trailer that matches it to its manifest row.

The oracle side of the tests uses ``subprocess`` git here, so a bug in ``gitrun`` cannot hide itself.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hyperqwen_patches.sources import basecommit

BRANCH = "qwen38/0.29"

PRISTINE: dict[bytes, bytes] = {
    b"vllm/__init__.py": b'"""vLLM."""\n\n__version__ = "0.29.0"\n',
    b"vllm/envs.py": b"".join(
        b"VLLM_KNOB_%d = int(os.getenv('VLLM_KNOB_%d', '0'))\n" % (i, i) for i in range(40)
    ),
    # Latin-1 bytes that are not valid UTF-8.
    b"vllm/latin1.txt": "caf\xe9 cr\xe8me br\xfbl\xe9e\nna\xefve\n".encode("latin-1"),
    # CRLF line endings.
    b"vllm/crlf.py": b"def a():\r\n    return 1\r\n\r\ndef b():\r\n    return 2\r\n",
    # No final newline.
    b"vllm/nonl.py": b"x = 1\ny = 2\nz = 3",
    b"vllm/worker/gpu_worker.py": b"".join(b"line %d of the worker\n" % i for i in range(60)),
    b"vllm/tools/run.sh": b"#!/bin/sh\necho run\n",
    b"vllm/old_name.py": b"".join(b"stable content %d\n" % i for i in range(12)),
}


@dataclass(frozen=True)
class FixtureCommit:
    row: str
    subject: str
    changes: Mapping[bytes, bytes | None]  # path -> new content (None: delete)
    modes: Mapping[bytes, str] | None = None  # path -> "100755"
    renames: Mapping[bytes, bytes] | None = None  # old -> new (git mv)
    body: str = ""


FORK_COMMITS: tuple[FixtureCommit, ...] = (
    FixtureCommit(
        row="envs-knob",
        subject="envs: register VLLM_HQP_KNOB",
        body="The knob joins the compile cache key.",
        changes={
            b"vllm/envs.py": PRISTINE[b"vllm/envs.py"].replace(
                b"VLLM_KNOB_20 =",
                b"VLLM_HQP_KNOB = int(os.getenv('VLLM_HQP_KNOB', '1'))\nVLLM_KNOB_20 =",
            ),
        },
    ),
    FixtureCommit(
        row="crlf-latin1",
        subject="Keep CRLF and Latin-1 bytes",
        changes={
            b"vllm/crlf.py": b"def a():\r\n    return 10\r\n\r\ndef b():\r\n    return 2\r\n",
            b"vllm/latin1.txt": "caf\xe9 cr\xe8me br\xfbl\xe9e\nna\xefve \xe0 la carte\n".encode(
                "latin-1"
            ),
            b"vllm/nonl.py": b"x = 1\ny = 20\nz = 3",
        },
    ),
    FixtureCommit(
        row="mode-rename",
        subject="Make run.sh executable and rename old_name.py",
        changes={
            b"vllm/worker/gpu_worker.py": PRISTINE[b"vllm/worker/gpu_worker.py"].replace(
                b"line 30 of the worker\n", b"line 30 of the patched worker\n"
            )
        },
        modes={b"vllm/tools/run.sh": "100755"},
        renames={b"vllm/old_name.py": b"vllm/new_name.py"},
    ),
    FixtureCommit(
        row="new-module",
        # Non-ASCII and longer than a mail header line: format.encodeEmailHeaders would rewrite it as
        # =?UTF-8?q?...?= and the header is folded; import must unfold and decode it back.
        subject="Add vllm/hqp/module.py, a naïve café module whose subject is longer than one header line",
        changes={b"vllm/hqp/module.py": b"VALUE = 1\n"},
    ),
)


class DictTree:
    """A pristine tree in memory (satisfies ``basecommit.TreeSource``)."""

    def __init__(self, files: Mapping[bytes, bytes]) -> None:
        self.files = dict(files)
        self.label = "dict:fixture"

    def paths(self) -> list[bytes]:
        return sorted(self.files)

    def read(self, path: bytes) -> bytes | None:
        return self.files.get(path)


def sh(
    args: list[str], cwd: Path, *, input: bytes | None = None, env: Mapping[str, str] | None = None
) -> bytes:
    """Run plain git (the oracle); fail with git's message."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    proc = subprocess.run(
        ["git", *args], cwd=cwd, input=input, capture_output=True, env=full_env, check=False
    )
    if proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr.decode(errors='replace')}")
    return proc.stdout


def write_tree_files(root: Path, files: Mapping[bytes, bytes]) -> None:
    for rel, data in files.items():
        path = root / os.fsdecode(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def init_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    sh(["init", "-q", "-b", "main", str(path)], cwd=path)
    return path


def base_into(repo: Path, files: Mapping[bytes, bytes] = PRISTINE) -> str:
    """Write the deterministic base commit of ``files`` into ``repo`` and return its SHA."""
    git_dir = Path(sh(["rev-parse", "--absolute-git-dir"], cwd=repo).decode().strip())
    return basecommit.write_base_commit(
        git_dir, DictTree(files), package="vllm", version="0.29.0"
    ).commit


def commit_env(i: int) -> dict[str, str]:
    date = f"{1700000000 + i * 3600} +0100"
    return {
        "GIT_AUTHOR_NAME": "Fork Author",
        "GIT_AUTHOR_EMAIL": "fork@example.invalid",
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_NAME": "Fork Committer",
        "GIT_COMMITTER_EMAIL": "committer@example.invalid",
        "GIT_COMMITTER_DATE": date,
    }


def apply_commit(repo: Path, i: int, fc: FixtureCommit) -> str:
    for old, new in (fc.renames or {}).items():
        sh(["mv", os.fsdecode(old), os.fsdecode(new)], cwd=repo)
    for rel, data in fc.changes.items():
        if data is None:
            sh(["rm", "-q", os.fsdecode(rel)], cwd=repo)
        else:
            write_tree_files(repo, {rel: data})
            sh(["add", os.fsdecode(rel)], cwd=repo)
    for rel, mode in (fc.modes or {}).items():
        sh(
            ["update-index", f"--chmod={'+x' if mode == '100755' else '-x'}", os.fsdecode(rel)],
            cwd=repo,
        )
        os.chmod(repo / os.fsdecode(rel), 0o755 if mode == "100755" else 0o644)
    message = fc.subject + "\n\n" + (fc.body + "\n\n" if fc.body else "") + f"Hqp-Row: {fc.row}\n"
    sh(
        ["commit", "-q", "--no-verify", "-F", "-"],
        cwd=repo,
        input=message.encode(),
        env=commit_env(i),
    )
    return sh(["rev-parse", "HEAD"], cwd=repo).decode().strip()


def make_fork(
    path: Path,
    commits: tuple[FixtureCommit, ...] = FORK_COMMITS,
    files: Mapping[bytes, bytes] = PRISTINE,
    branch: str = BRANCH,
) -> tuple[str, list[str]]:
    """A maintainer's fork with a work tree: base commit + one commit per fixture row, checked out."""
    init_repo(path)
    base = base_into(path, files)
    sh(["update-ref", f"refs/heads/{branch}", base], cwd=path)
    sh(["symbolic-ref", "HEAD", f"refs/heads/{branch}"], cwd=path)
    sh(["read-tree", "-u", "--reset", "HEAD"], cwd=path)
    shas = [apply_commit(path, i, fc) for i, fc in enumerate(commits)]
    return base, shas


# Every knob a user or a repository can set that changes format-patch or diff output (the leaks listed
# in issue 4, plus the ones found while pinning). Written to the global file AND to .git/config.
HOSTILE_CONFIG = """\
[diff]
\tnoprefix = true
\tmnemonicPrefix = true
\tcontext = 9
\tinterHunkContext = 7
\trenames = copies
\talgorithm = histogram
\tsuppressBlankEmpty = true
\tindentHeuristic = false
\trelative = true
\torderFile = /nonexistent-order
\texternal = false
[diff "hostile"]
\txfuncname = ^(.*)$
\ttextconv = tr a-z A-Z
[format]
\theaders = "X-Hostile: yes\\n"
\tto = someone@example.invalid
\tcc = other@example.invalid
\tcoverLetter = true
\tuseAutoBase = true
\tencodeEmailHeaders = true
\tsignature = hostile-signature
\tsignOff = true
\tnumbered = true
\tthread = shallow
\tsubjectPrefix = HOSTILE
\tnotes = true
\tfrom = true
\tattach = true
[core]
\tabbrev = 7
\tquotePath = false
\tautocrlf = true
\tattributesFile = {attributes}
[i18n]
\tlogOutputEncoding = ISO-8859-1
\tcommitEncoding = ISO-8859-1
[pack]
\tthreads = 8
[user]
\tname = Hostile User
\temail = hostile@example.invalid
[log]
\tshowSignature = true
[color]
\tui = always
[commit]
\tgpgSign = true
[user]
\tsigningKey = nonexistent
[mailinfo]
\tscissors = true
"""

HOSTILE_ATTRIBUTES = "*.py diff=hostile\n*.txt -diff\n*.sh binary\n"


def make_hostile(repo: Path, home: Path) -> None:
    """Write the hostile config to the global file and the repository's config, and hostile attributes."""
    attributes = home / "hostile-attributes"
    attributes.write_text(HOSTILE_ATTRIBUTES)
    text = HOSTILE_CONFIG.format(attributes=attributes)
    global_file = Path(os.environ["GIT_CONFIG_GLOBAL"])
    global_file.write_text(text)
    git_dir = Path(sh(["rev-parse", "--absolute-git-dir"], cwd=repo).decode().strip())
    with (git_dir / "config").open("a") as fh:
        fh.write(text)
    (git_dir / "info").mkdir(exist_ok=True)
    (git_dir / "info" / "attributes").write_text(HOSTILE_ATTRIBUTES)
    (repo / ".gitattributes").write_text(HOSTILE_ATTRIBUTES)

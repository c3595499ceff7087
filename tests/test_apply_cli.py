"""``hyperqwen-patches apply``: the real command in a subprocess, on real directories.

Every failure case checks that DIR is byte for byte unchanged (paths, contents and modes) and that the
error names what is wrong; every success case checks the bytes written.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hyperqwen_patches.sources.tree import Tree, TreeWriteError


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", "apply", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
        env={**os.environ, "COLUMNS": "400"},  # rich wraps at 80 columns off a terminal
    )


def snapshot(root: Path) -> dict[str, tuple[int, bytes | str]]:
    """Every entry under root: mode and bytes (files) or link target (symlinks)."""
    out: dict[str, tuple[int, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            info = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(info.st_mode):
                out[rel] = (info.st_mode, os.readlink(path))
            elif stat.S_ISREG(info.st_mode):
                out[rel] = (info.st_mode, path.read_bytes())
            else:
                out[rel] = (info.st_mode, "")
    return out


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "site-packages"
    (root / "vllm" / "v1").mkdir(parents=True)
    (root / "vllm" / "envs.py").write_bytes(b"import os\n\nA = 1\nB = 2\nC = 3\n")
    (root / "vllm" / "v1" / "worker.py").write_bytes(
        b"".join(b"line %d\n" % i for i in range(1, 41))
    )
    (root / "vllm" / "latin1.py").write_bytes(b"# caf\xe9\nx = '\xff'\n")
    return root


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


ENVS = b"--- a/vllm/envs.py\n+++ b/vllm/envs.py\n@@ -3,3 +3,4 @@\n A = 1\n-B = 2\n+B = 20\n+D = 4\n C = 3\n"
WORKER = (
    b"--- a/vllm/v1/worker.py\n+++ b/vllm/v1/worker.py\n"
    b"@@ -9,3 +9,3 @@\n line 9\n-line 10\n+line ten\n line 11\n"
)
CREATE = b"--- /dev/null\n+++ b/vllm/kvarn/__init__.py\n@@ -0,0 +1,2 @@\n+'''KVarN.'''\n+X = 1\n"
BROKEN = b"--- a/vllm/envs.py\n+++ b/vllm/envs.py\n@@ -1,3 +1,3 @@\n import os\n-nope\n+yes\n \n"


def test_apply_writes_every_patch(tree: Path, tmp_path: Path) -> None:
    patches = [write(tmp_path, f"{i}.patch", d) for i, d in enumerate([ENVS, WORKER, CREATE])]
    proc = run(tree, *[x for p in patches for x in ("--patch", p)])
    assert proc.returncode == 0, proc.stderr
    assert (tree / "vllm/envs.py").read_bytes() == b"import os\n\nA = 1\nB = 20\nD = 4\nC = 3\n"
    assert b"line ten\n" in (tree / "vllm/v1/worker.py").read_bytes()
    assert (tree / "vllm/kvarn/__init__.py").read_bytes() == b"'''KVarN.'''\nX = 1\n"
    assert "ok: 3 applied, 0 already applied; changed 3 files" in proc.stdout
    assert not list(tree.rglob(".hqp-*"))  # no temporary files left behind
    again = run(tree, *[x for p in patches for x in ("--patch", p)])
    assert (
        again.returncode == 0 and "already carries all 3 patches; nothing to write" in again.stdout
    )


def test_json_records_per_hunk(tree: Path, tmp_path: Path) -> None:
    worker = tree / "vllm/v1/worker.py"
    worker.write_bytes(b"new\n" * 3 + worker.read_bytes())
    proc = run(tree, "--patch", write(tmp_path, "w.patch", WORKER), "--json", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    (patch,) = payload["patches"]
    (file,) = patch["files"]
    (hunk,) = file["hunks"]
    assert file["path"] == "vllm/v1/worker.py" and file["status"] == "applied"
    assert {k: hunk[k] for k in ("stated_line", "applied_line", "offset", "status")} == {
        "stated_line": 9,
        "applied_line": 12,
        "offset": 3,
        "status": "offset",
    }
    assert payload["totals"]["hunks"] == {
        "exact": 0,
        "offset": 1,
        "failed": 0,
        "ambiguous": 0,
        "already_applied": 0,
    }
    assert payload["dry_run"] is True and payload["written"] == []
    assert payload["totals"]["files_read"] == 1  # only the file the patch touches, of 3
    assert b"line ten" not in worker.read_bytes()  # dry run wrote nothing


def test_a_failed_hunk_writes_nothing_and_shows_the_near_miss(tree: Path, tmp_path: Path) -> None:
    before = snapshot(tree)
    good = write(tmp_path, "good.patch", WORKER)
    bad = write(tmp_path, "bad.patch", BROKEN)
    proc = run(tree, "--patch", good, "--patch", bad)
    assert proc.returncode == 1
    assert snapshot(tree) == before
    assert "FAILED" in proc.stdout and "bad.patch" in proc.stdout
    # The aligned view: "nope" is the one line the file lacks (positionally, 2 of 3 would differ).
    assert "closest match at line 1: 2 of 3 preimage lines are there" in proc.stdout
    assert "\n         import os\n        -nope\n" in proc.stdout
    assert "nothing was written" in proc.stderr
    payload = json.loads(run(tree, "--patch", good, "--patch", bad, "--json").stdout)
    assert [p["status"] for p in payload["patches"]] == ["applied", "failed"]
    miss = payload["patches"][1]["files"][0]["hunks"][0]["near_miss"]
    assert miss["differences"] == [
        {"line": 2, "expected": "nope\n", "actual": "\n"},
        {"line": 3, "expected": "\n", "actual": "A = 1\n"},
    ]


def test_policies_from_the_command_line(tree: Path, tmp_path: Path) -> None:
    worker = tree / "vllm/v1/worker.py"
    worker.write_bytes(b"new\n" * 3 + worker.read_bytes())
    patch = write(tmp_path, "w.patch", WORKER)
    assert run(tree, "--patch", patch, "--exact", "--dry-run").returncode == 1
    assert run(tree, "--patch", patch, "--max-offset", "2", "--dry-run").returncode == 1
    shown = run(tree, "--patch", patch, "--max-offset", "3", "--dry-run")
    assert shown.returncode == 0
    row = next(line for line in shown.stdout.splitlines() if "worker.py" in line)
    assert [cell.strip() for cell in row.split("│")[2:7]] == ["#1", "9", "12", "+3", "offset"]
    worker.write_bytes(worker.read_bytes() + b"line 9\nline 10\nline 11\n")  # a decoy copy
    assert run(tree, "--patch", patch, "--dry-run").returncode == 0
    strict = run(tree, "--patch", patch, "--strict", "--dry-run")
    assert strict.returncode == 1 and "also matches at line(s) 44" in strict.stdout


def test_check_applied_reports_patch_by_patch(tree: Path, tmp_path: Path) -> None:
    patches = [write(tmp_path, f"{i}.patch", d) for i, d in enumerate([ENVS, WORKER, CREATE])]
    args = [x for p in patches for x in ("--patch", p)]
    missing = run(tree, *args, "--check-applied", "--json")
    assert missing.returncode == 1
    assert [p["status"] for p in json.loads(missing.stdout)["patches"]] == ["missing"] * 3
    assert run(tree, "--patch", patches[0]).returncode == 0
    partial = run(tree, *args, "--check-applied")
    assert partial.returncode == 1
    assert "does not carry 2 of 3 patches" in partial.stderr
    assert str(patches[1]) in partial.stderr and str(patches[2]) in partial.stderr
    before = snapshot(tree)
    assert run(tree, *args).returncode == 0  # the first is already applied, the rest apply
    assert snapshot(tree) != before
    assert run(tree, *args, "--check-applied").returncode == 0


def test_no_patch_and_no_manifest_is_a_usage_error(tree: Path, tmp_path: Path) -> None:
    proc = run(tree, cwd=tmp_path)
    assert proc.returncode == 2
    assert "no --patch given and no manifest found" in proc.stderr


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", "empty patch"),
        (b"--- a/vllm/envs.py\n+++ b/vllm/envs.py\n@@ -1,3 +1,3 @@\n import os\n", "truncated"),
        (
            b"--- a/vllm/envs.py\n+++ b/vllm/envs.py\n@@ -1,2 +1,2 @@\n import os\n%%%\n",
            "malformed",
        ),
        (
            b"--- a/vllm/envs.py\n+++ b/vllm/envs.py\n@@ -1,1 +1,1 @@\n-import os\n+import sys\n+x\n",
            "more lines than its header",
        ),
        (
            b"diff --git a/vllm/x.so b/vllm/x.so\nBinary files a/vllm/x.so and b/vllm/x.so differ\n",
            "binary diff",
        ),
        (b"--- a/../outside.py\n+++ b/../outside.py\n@@ -1 +1 @@\n-a\n+b\n", "escape"),
    ],
)
def test_bad_patch_files_exit_2_and_write_nothing(
    tree: Path, tmp_path: Path, data: bytes, words: str
) -> None:
    before = snapshot(tree)
    good = write(tmp_path, "good.patch", WORKER)
    bad = write(tmp_path, "bad.patch", data)
    proc = run(tree, "--patch", good, "--patch", bad)
    assert proc.returncode == 2, proc.stderr
    assert words in proc.stderr and "bad.patch" in proc.stderr
    assert snapshot(tree) == before


def test_missing_patch_file_and_missing_dir_are_usage_errors(tree: Path, tmp_path: Path) -> None:
    proc = run(tree, "--patch", tmp_path / "nope.patch")
    assert proc.returncode == 2 and "nope.patch does not exist" in proc.stderr
    good = write(tmp_path, "good.patch", WORKER)
    proc = run(tmp_path / "no-such-dir", "--patch", good)
    assert proc.returncode == 2 and "does not exist" in proc.stderr


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"--- a/vllm/gone.py\n+++ b/vllm/gone.py\n@@ -1 +1 @@\n-a\n+b\n", "does not exist"),
        (b"--- /dev/null\n+++ b/vllm/envs.py\n@@ -0,0 +1 @@\n+x\n", "already exists"),
        (
            b"--- a/vllm/envs.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-import os\n-\n",
            "content differs",
        ),
    ],
)
def test_tree_mismatches_exit_1_and_write_nothing(
    tree: Path, tmp_path: Path, data: bytes, words: str
) -> None:
    before = snapshot(tree)
    proc = run(
        tree,
        "--patch",
        write(tmp_path, "p.patch", WORKER),
        "--patch",
        write(tmp_path, "x.patch", data),
    )
    assert proc.returncode == 1
    assert words in proc.stdout
    assert snapshot(tree) == before


def test_symlink_pointing_outside_is_refused(tree: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_bytes(b"a\n")
    (tree / "vllm" / "escape").symlink_to(outside)
    before = snapshot(tree)
    data = b"--- a/vllm/escape/secret.py\n+++ b/vllm/escape/secret.py\n@@ -1 +1 @@\n-a\n+b\n"
    proc = run(tree, "--patch", write(tmp_path, "s.patch", data))
    assert proc.returncode == 2
    assert "outside" in proc.stderr and "symlink" in proc.stderr
    assert snapshot(tree) == before
    assert (outside / "secret.py").read_bytes() == b"a\n"


def test_absolute_path_is_refused_by_the_tree(tree: Path) -> None:
    with pytest.raises(Exception, match="absolute"):
        Tree(tree).read(b"/etc/passwd")


def test_non_utf8_content_passes_through_unchanged(tree: Path, tmp_path: Path) -> None:
    data = b"--- a/vllm/latin1.py\n+++ b/vllm/latin1.py\n@@ -1,2 +1,2 @@\n # caf\xe9\n-x = '\xff'\n+x = '\xfe\xff'\n"
    proc = run(tree, "--patch", write(tmp_path, "l.patch", data), "--json")
    assert proc.returncode == 0, proc.stderr
    assert (tree / "vllm/latin1.py").read_bytes() == b"# caf\xe9\nx = '\xfe\xff'\n"


def test_write_failure_midway_restores_the_directory(tree: Path) -> None:
    """A later target that cannot be created (its parent is a file) after earlier ones were staged."""
    (tree / "zzz").write_bytes(b"a file, not a directory\n")
    before = snapshot(tree)
    changes = {
        b"vllm/envs.py": b"changed\n",
        b"vllm/new/module.py": b"new\n",
        b"vllm/v1/worker.py": None,
        b"zzz/child.py": b"cannot be written\n",
    }
    with pytest.raises(TreeWriteError, match="nothing was changed"):
        Tree(tree).write(changes)
    assert snapshot(tree) == before


def test_a_failure_among_parallel_writes_restores_the_directory_and_names_the_file(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Enough files that the temporaries are written by several threads: one that cannot be
    written stops them all, every file is put back, no temporary is left, and the error names the
    file. The failure is injected (ENOSPC for one target's temporary, as a full disk gives it):
    this runs as root, for whom no permission makes a create fail."""
    import errno

    from hyperqwen_patches.sources import journal
    from hyperqwen_patches.sources import tree as treemod

    for i in range(60):
        (tree / "vllm" / f"m{i:02d}.py").write_bytes(b"x = %d\n" % i)
    before = snapshot(tree)
    changes: dict[bytes, bytes | None] = {b"vllm/m%02d.py" % i: b"y = %d\n" % i for i in range(60)}
    assert len(changes) >= 2 * treemod.PARALLEL_WRITES_FROM
    real_write_temp = journal.write_temp
    threads: set[int] = set()

    def write_temp(directory: bytes, content: bytes, mode: int, **kw: object) -> bytes:
        import threading

        threads.add(threading.get_ident())
        if content == b"y = 41\n":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write_temp(directory, content, mode, **kw)

    monkeypatch.setattr(journal, "write_temp", write_temp)
    with pytest.raises(TreeWriteError, match=r"nothing was changed") as err:
        Tree(tree).write(changes)
    monkeypatch.undo()
    assert "No space left on device: " in str(err.value)
    assert str(err.value).split(")")[0].endswith("site-packages/vllm/m41.py")
    assert len(threads) >= 2
    assert snapshot(tree) == before
    assert not [p for p in tree.rglob("*") if p.name.startswith(".hqp")]


def test_rename_failure_after_replacements_restores_them(tree: Path) -> None:
    """The rename phase fails on its last target (a directory is in the way) after earlier files
    were already replaced: they are put back from memory, with their permissions."""
    (tree / "vllm" / "zz_dir").mkdir()
    (tree / "vllm" / "zz_dir" / "keep.py").write_bytes(b"keep\n")
    (tree / "vllm" / "envs.py").chmod(0o640)
    before = snapshot(tree)
    changes = {b"vllm/envs.py": b"changed\n", b"vllm/v1/worker.py": None, b"vllm/zz_dir": b"x\n"}
    with pytest.raises(TreeWriteError, match="nothing was changed"):
        Tree(tree).write(changes)
    assert snapshot(tree) == before


def test_a_rename_failure_among_parallel_renames_restores_them(tree: Path) -> None:
    """The same with enough files that the renames run in several threads: whichever renames
    finished are put back with their permissions, and the error names the target in the way."""
    from hyperqwen_patches.sources import tree as treemod

    for i in range(60):
        (tree / "vllm" / f"m{i:02d}.py").write_bytes(b"x = %d\n" % i)
        (tree / "vllm" / f"m{i:02d}.py").chmod(0o640 if i % 2 else 0o644)
    (tree / "vllm" / "m30_dir").mkdir()
    (tree / "vllm" / "m30_dir" / "keep.py").write_bytes(b"keep\n")
    before = snapshot(tree)
    changes: dict[bytes, bytes | None] = {b"vllm/m%02d.py" % i: b"y\n" for i in range(60)}
    changes[b"vllm/m30_dir"] = b"in the way\n"
    assert len(changes) >= 2 * treemod.PARALLEL_WRITES_FROM
    with pytest.raises(TreeWriteError, match="nothing was changed") as err:
        Tree(tree).write(changes)
    assert "m30_dir" in str(err.value)
    assert snapshot(tree) == before
    assert not [p for p in tree.rglob("*") if p.name.startswith(".hqp")]


def test_deleting_the_last_file_removes_its_empty_directories(tree: Path, tmp_path: Path) -> None:
    """GNU patch removes the directories a deletion leaves empty; so do we (nothing more)."""
    (tree / "vllm/v1/sub").mkdir()
    (tree / "vllm/v1/sub/only.py").write_bytes(b"x = 1\n")
    data = b"--- a/vllm/v1/sub/only.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x = 1\n"
    assert run(tree, "--patch", write(tmp_path, "d.patch", data)).returncode == 0
    assert not (tree / "vllm/v1/sub").exists()
    assert (tree / "vllm/v1/worker.py").exists()


def test_write_keeps_modes_and_applies_new_ones(tree: Path) -> None:
    envs = tree / "vllm/envs.py"
    envs.chmod(0o600)
    Tree(tree).write(
        {b"vllm/envs.py": b"x\n", b"vllm/run.sh": b"#!/bin/sh\n"}, {b"vllm/run.sh": 0o100755}
    )
    assert stat.S_IMODE(envs.stat().st_mode) == 0o600
    assert stat.S_IMODE((tree / "vllm/run.sh").stat().st_mode) == 0o755


def test_a_lopsided_hunk_says_why_it_cannot_match(tree: Path, tmp_path: Path) -> None:
    """A hunk with more leading than trailing context matches, line for line, at its stated place,
    and still fails: at fuzz 0 GNU patch places it only at the end of the file. The report used to
    say "4 of 4 lines equal; differing:" and list nothing. GNU patch is the oracle for the failure."""
    from conftest import require_gnu_patch

    data = b"--- a/vllm/envs.py\n+++ b/vllm/envs.py\n@@ -2,3 +2,4 @@\n \n A = 1\n+Z = 0\n B = 2\n"
    patch = write(tmp_path, "lopsided.patch", data)
    gnu = subprocess.run(
        [require_gnu_patch(), "-p1", "--fuzz", "0", "--dry-run", "-i", str(patch)],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    assert gnu.returncode == 1 and "Hunk #1 FAILED at 2." in gnu.stdout
    proc = run(tree, "--patch", patch)
    assert proc.returncode == 1
    assert (
        f"hunk #1 (stated line 2, {patch}:3): its 2 leading and 1 trailing context lines"
        in proc.stdout
    )
    assert "can only match at the end of the file" in proc.stdout
    assert "its lines match at line 2: all 3 equal" in proc.stdout
    assert proc.stdout.count("nothing was written") + proc.stderr.count("nothing was written") == 1


def test_a_git_rename_keeps_the_mode_as_git_does(tree: Path, tmp_path: Path) -> None:
    """A git rename without mode lines turned a 0755 file into 0644; git (the oracle) keeps it."""
    (tree / "vllm/run.sh").write_bytes(b"#!/bin/sh\necho one\n")
    (tree / "vllm/run.sh").chmod(0o755)
    data = (
        b"diff --git a/vllm/run.sh b/vllm/start.sh\nsimilarity index 80%\n"
        b"rename from vllm/run.sh\nrename to vllm/start.sh\n--- a/vllm/run.sh\n+++ b/vllm/start.sh\n"
        b"@@ -1,2 +1,2 @@\n #!/bin/sh\n-echo one\n+echo two\n"
    )
    patch = write(tmp_path, "rename.patch", data)
    oracle = tmp_path / "oracle"
    shutil.copytree(tree, oracle)
    subprocess.run(["git", "apply", str(patch)], cwd=oracle, check=True)
    assert run(tree, "--patch", patch).returncode == 0
    for root in (tree, oracle):
        assert not (root / "vllm/run.sh").exists()
    assert (tree / "vllm/start.sh").read_bytes() == (oracle / "vllm/start.sh").read_bytes()
    assert stat.S_IMODE((tree / "vllm/start.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((oracle / "vllm/start.sh").stat().st_mode) == 0o755


@pytest.mark.parametrize("mode", ["120000", "160000"])
def test_symlinks_and_gitlinks_are_refused_by_name(tree: Path, tmp_path: Path, mode: str) -> None:
    """They were written as plain files holding the link target (or the submodule's SHA)."""
    data = (
        f"diff --git a/vllm/link b/vllm/link\nnew file mode {mode}\nindex 0000000..1111111\n"
        "--- /dev/null\n+++ b/vllm/link\n@@ -0,0 +1 @@\n+envs.py\n\\ No newline at end of file\n"
    ).encode()
    before = snapshot(tree)
    proc = run(tree, "--patch", write(tmp_path, "link.patch", data))
    assert proc.returncode == 2
    assert f"link.patch:2: mode {mode} is a" in proc.stderr
    assert snapshot(tree) == before


def test_a_fifo_is_refused_not_read_forever(tree: Path, tmp_path: Path) -> None:
    """A FIFO where a file is expected hung the read forever (GNU: "not a regular file")."""
    os.unlink(tree / "vllm/envs.py")
    os.mkfifo(tree / "vllm/envs.py")
    proc = subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", "apply", str(tree), "--patch",
         str(write(tmp_path, "e.patch", ENVS))],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "vllm/envs.py" in proc.stderr and "not a regular file" in proc.stderr


def test_deleting_a_symlink_is_refused_and_its_target_kept(tree: Path, tmp_path: Path) -> None:
    """Deleting a file that is a symlink inside DIR deleted the link's target instead."""
    (tree / "vllm/alias.py").symlink_to("envs.py")
    target = (tree / "vllm/envs.py").read_bytes()
    data = b"--- a/vllm/alias.py\n+++ /dev/null\n@@ -1,5 +0,0 @@\n" + b"".join(
        b"-" + line for line in target.splitlines(keepends=True)
    )
    proc = run(tree, "--patch", write(tmp_path, "del.patch", data))
    assert proc.returncode == 2
    assert "is a symbolic link" in proc.stderr
    assert (tree / "vllm/envs.py").read_bytes() == target
    assert (tree / "vllm/alias.py").is_symlink()


def test_a_device_as_patch_file_is_refused_and_a_pipe_is_read(tree: Path, tmp_path: Path) -> None:
    """GNU patch reads a patch from a pipe (``-i /dev/stdin``, ``<(git diff)``) and so does apply; a
    character device such as /dev/zero would be read until memory runs out, so it is refused."""
    before = snapshot(tree)
    proc = run(tree, "--patch", "/dev/zero")
    assert proc.returncode == 2
    assert "patch file /dev/zero is not a regular file or a pipe" in proc.stderr
    assert snapshot(tree) == before
    piped = subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", "apply", str(tree), "--patch", "/dev/stdin"],
        input=ENVS, capture_output=True, check=False,
    )  # fmt: skip
    assert piped.returncode == 0, piped.stderr
    assert (tree / "vllm/envs.py").read_bytes() == b"import os\n\nA = 1\nB = 20\nD = 4\nC = 3\n"


def test_terminal_control_bytes_in_patch_lines_are_printed_escaped(
    tree: Path, tmp_path: Path
) -> None:
    """A line holding ESC sequences (clear screen, set title) is shown as ``\\x1b[2J``, never sent to
    the terminal; the JSON keeps the exact text (its own escapes)."""
    (tree / "vllm/x.py").write_bytes(b"a\nb\x1b[2Jc\nd\n")
    bad = write(
        tmp_path,
        "esc.patch",
        b"--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1,3 +1,3 @@\n a\n-b\x1b[2Jzz\n+B\x1b]0;t\x07\x9b\n d\n",
    )
    proc = run(tree, "--patch", bad)
    assert proc.returncode == 1
    assert "\x1b" not in proc.stdout + proc.stderr and "\x9b" not in proc.stdout + proc.stderr
    assert "-b\\x1b[2Jzz" in proc.stdout and "+b\\x1b[2Jc" in proc.stdout
    data = json.loads(run(tree, "--patch", bad, "--json").stdout)
    aligned = data["patches"][0]["files"][0]["hunks"][0]["near_miss"]["aligned"]
    assert "-b\x1b[2Jzz\n" in aligned

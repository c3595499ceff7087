"""One generated series with every shape a real port meets (issue #21), through the CLI as a
maintainer runs it, GNU patch as the oracle for the verdicts and the failed lines.

The series (on a small 0.29.0 "release"; 0.30.0 changes it as a real release does):

- ``base``: a line the release also changed: a real conflict (the same line: no merge takes it);
- ``cascade``: edits a line ``base`` adds: fails in sequence only because ``base`` was not carried;
- ``layer-1`` / ``layer-2``: the second builds on the first; apply in sequence, layer-2 fails alone;
- ``gated``: its lines were taken upstream re-indented under a new ``if``: upstream in changed form;
- ``widen``: widens a signature and passes the new keyword in the same row: no static error;
- ``merge``: the release changed a line of the hunk's context, two lines from the change: fuzz 0
  fails, a three-way merge takes it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hyperqwen_patches.fork import importing
from hyperqwen_patches.series.manifest import load_manifest
from hyperqwen_patches.sources.pristine import open_pristine
from tests.conftest import require_gnu_patch
from tests.test_port import BASE, lines_with, make_patch, make_repo, release
from tests.test_port_rebase import git

GATED = "import os\n\n\ndef setup(cfg):\n    size = cfg.size\n    name = cfg.name\n    return size, name\n"
LIB = "def fetch(\n    url,\n):\n    return url\n"
USER = 'from vllm.lib import fetch\n\n\ndef go():\n    return fetch("u")\n'


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("shapes")
    w = tmp / "w"
    base_after = lines_with({20: "line 20 ours\n"})
    layer_1 = lines_with({8: "line 8 layer one\n"})
    gated_after = GATED.replace(
        "    name = cfg.name\n",
        "    name = cfg.name\n    if cfg.tp > 1:\n        size = size // cfg.tp\n",
    )
    old_files = {
        "vllm/__init__.py": "",
        "vllm/envs.py": BASE,
        "vllm/layers.py": BASE,
        "vllm/setup.py": GATED,
        "vllm/lib.py": LIB,
        "vllm/user.py": USER,
        "vllm/merge.py": BASE,
    }
    new_files = {
        **old_files,
        "vllm/envs.py": lines_with({20: "line 20 upstream\n"}),
        "vllm/setup.py": GATED.replace(
            "    name = cfg.name\n",
            "    name = cfg.name\n    if os.name != 'nt':\n        if cfg.tp > 1:\n"
            "            size = size // cfg.tp\n",
        ),
        "vllm/merge.py": lines_with({17: "line 17 upstream\n"}),
    }
    old = release(tmp, "old", old_files)
    new = release(tmp, "new", new_files)
    rows = [
        ("base", make_patch("vllm/envs.py", BASE, base_after, w)),
        ("cascade", make_patch(
            "vllm/envs.py", base_after, lines_with({20: "line 20 ours, tuned\n"}), w)),
        ("layer-1", make_patch("vllm/layers.py", BASE, layer_1, w)),
        ("layer-2", make_patch(
            "vllm/layers.py", layer_1, lines_with({9: "line 9 layer two\n"}, layer_1), w)),
        ("gated", make_patch("vllm/setup.py", GATED, gated_after, w)),
        ("widen", make_patch("vllm/lib.py", LIB, LIB.replace("    url,\n", "    url,\n    headers=None,\n"), w)
         + make_patch("vllm/user.py", USER, USER.replace('fetch("u")', 'fetch("u", headers={})'), w)),
        ("merge", make_patch("vllm/merge.py", BASE, lines_with({20: "line 20 merged\n"}), w)),
    ]  # fmt: skip
    repo = make_repo(tmp, rows)
    manifest = repo / "patches/manifest.yaml"
    manifest.write_text(
        manifest.read_text().replace(
            "rows:\n", "export_points:\n  - name: qwen\n    branch: qwen/0.29\nrows:\n"
        )
    )
    proc = hqp(repo, "port", "--to", "0.30.0", *sources(old, new), "--json")
    return {"tmp": tmp, "old": old, "new": new, "repo": repo, "rows": dict(rows), "port": proc}


def sources(old: Path, new: Path) -> list[str]:
    return ["--from-source", f"dir:{old}", "--source", f"dir:{new}"]


def hqp(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", *args, "--repo", str(repo)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def by_row(project: dict) -> dict[str, dict]:
    doc = json.loads(project["port"].stdout)
    return {r["name"]: r for r in doc["reports"][0]["rows"]}


def conflicts(attempt: dict) -> list[dict]:
    return [h for f in attempt["files"] for h in f["hunks"] if h["status"] == "conflict"]


def test_each_shape_has_its_status_and_cause(project: dict) -> None:
    assert project["port"].returncode == 1  # rows conflict
    # --json: the document says it (stderr carries no second account, only progress lines)
    rows = by_row(project)
    assert len(rows) == 7
    assert sum(r["status"] == "conflicts" for r in rows.values()) == 4
    assert not any(line.startswith("error:") for line in project["port"].stderr.splitlines())
    rows = by_row(project)
    assert {n: (r["status"], r["alone"]["status"]) for n, r in rows.items()} == {
        "base": ("conflicts", "conflicts"),
        "cascade": ("conflicts", "conflicts"),
        "layer-1": ("exact", "exact"),
        "layer-2": ("exact", "conflicts"),
        "gated": ("conflicts", "conflicts"),
        "widen": ("exact", "exact"),
        "merge": ("conflicts", "conflicts"),
    }
    assert rows["cascade"]["cascade_from"] == ["base"]
    (hunk,) = conflicts(rows["cascade"]["in_sequence"])
    assert hunk["cause"].startswith("conflict by cascade from base")
    assert [h["caused_by"] for h in conflicts(rows["layer-2"]["alone"])] == [["layer-1"]]
    assert rows["base"]["cascade_from"] == [] and rows["merge"]["cascade_from"] == []
    assert rows["gated"]["upstream_form"] == "changed"
    assert all(rows[n]["upstream_form"] is None for n in rows if n != "gated")
    doc = json.loads(project["port"].stdout)["reports"][0]
    assert doc["counts"]["conflicts_by_cascade"] == 1
    assert doc["counts"]["upstream_in_changed_form"] == 1
    assert doc["statics"]["findings"] == []  # widen's own keyword binds where it applies


def test_gnu_patch_agrees_on_every_verdict_and_failed_line(project: dict) -> None:
    """In sequence on the new release (a row goes in when GNU applies it) and alone: the same rows
    apply, and every failed hunk's ``reported_line`` is GNU's ``FAILED at`` number."""
    rows, new, tmp = by_row(project), project["new"], project["tmp"]
    seq = tmp / "gnu-seq"
    shutil.copytree(new, seq)
    for name, text in project["rows"].items():
        for where, attempt in ((seq, "in_sequence"), (new, "alone")):
            dry = subprocess.run(
                [require_gnu_patch(), "-p1", "--fuzz=0", "--forward", "--dry-run", "-d", str(where)],
                input=text, capture_output=True, text=True, check=False,
            )  # fmt: skip
            ours = rows[name] if attempt == "in_sequence" else rows[name]["alone"]
            assert (dry.returncode == 0) == (ours["status"] in ("exact", "offset")), (name, attempt)
            failed = [int(n) for n in re.findall(r"FAILED at (\d+)", dry.stdout)]
            assert failed == [h["reported_line"] for h in conflicts(rows[name][attempt])], name
            if where is seq and dry.returncode == 0:
                subprocess.run(
                    [require_gnu_patch(), "-p1", "--fuzz=0", "-s", "-d", str(seq)],
                    input=text, text=True, check=True,
                )  # fmt: skip


def test_the_rebase_merges_what_it_can_and_pauses_for_the_rest(project: dict) -> None:
    repo, old, new, tmp = project["repo"], project["old"], project["new"], project["tmp"]
    fork = tmp / "fork"
    importing.import_series(
        load_manifest(repo), fork, tree=open_pristine(f"dir:{old}", version="0.29.0"), create=True
    )
    pauses = []
    proc = hqp(repo, "port", "--to", "0.30.0", *sources(old, new), "--rebase", "--fork", str(fork),
               "--json")  # fmt: skip
    while True:
        rebase = json.loads(proc.stdout)["reports"][0]["rebase"]
        if rebase["state"] != "paused":
            break
        assert proc.returncode == 1
        pauses.append((rebase["paused"]["row"], [f["how"] for f in rebase["paused"]["files"]]))
        proc = hqp(repo, "port", "--rebase", "--skip", "--fork", str(fork), "--json")
    # base clashes on its line; cascade edits base's line, which the branch does not have; gated's
    # lines are in the release already, re-indented: each needs a person.
    assert pauses == [("base", ["conflict"]), ("cascade", ["conflict"]), ("gated", ["conflict"])]
    assert proc.returncode == 1  # three rows skipped
    assert [(c["row"], c["how"]) for c in rebase["commits"]] == [
        ("layer-1", "applied"),
        ("layer-2", "applied"),
        ("widen", "applied"),
        ("merge", "merged"),
    ]
    assert rebase["skipped"] == ["base", "cascade", "gated"]
    merged = git(fork, "show", f"{rebase['tip']}:vllm/merge.py") + "\n"
    assert merged == lines_with({17: "line 17 upstream\n", 20: "line 20 merged\n"})


def test_a_crash_while_pausing_again_keeps_the_resolution(
    project: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--continue takes the person's resolution of ``base``, goes on, and dies while checking out
    the next row that needs a person (fault injected where the worktree is made). The state already
    holds the resolved commit; --abort then removes everything; nothing else of the fork moved."""
    from hyperqwen_patches.errors import UsageError
    from hyperqwen_patches.port import pausing
    from hyperqwen_patches.port.model import RebaseRequest
    from hyperqwen_patches.port.rebase import abort_rebase, paused_rebase
    from hyperqwen_patches.port.run import port

    repo, old, new = project["repo"], project["old"], project["new"]
    fork = tmp_path / "fork"
    importing.import_series(
        load_manifest(repo), fork, tree=open_pristine(f"dir:{old}", version="0.29.0"), create=True
    )
    refs = git(fork, "for-each-ref")
    kw = {"from_source": f"dir:{old}", "to_source": f"dir:{new}"}
    busy = tmp_path / "busy"
    busy.mkdir()
    with pytest.raises(UsageError, match="exists"):
        port(repo, "0.30.0", rebase=RebaseRequest(fork=fork, worktree=busy), **kw)
    assert paused_rebase(fork) is None  # refused before anything was written
    _, first = port(repo, "0.30.0", rebase=RebaseRequest(fork=fork), **kw)
    assert first is not None and first.paused is not None and first.paused.row == "base"
    wt = first.paused.worktree
    (wt / "vllm/envs.py").write_text(lines_with({20: "line 20 upstream and ours\n"}))

    def dies(*args: object) -> None:
        raise KeyboardInterrupt

    # The worktree of one pause is moved on to the next: the fault strikes there.
    monkeypatch.setattr(pausing, "move_worktree", dies)
    monkeypatch.setattr(pausing, "open_worktree", dies)
    with pytest.raises(KeyboardInterrupt):
        port(repo, "0.30.0", rebase=RebaseRequest(fork=fork, action="continue"), **kw)
    saved = paused_rebase(fork)
    assert saved.row == "cascade"
    assert (saved.commits[0][0], saved.commits[0][2]) == ("base", "resolved")
    # base's worktree is still the rebase's own: --abort finds it by its lock, not by the state
    assert [p.resolve() for p in pausing.ours(fork / ".git")] == [wt.resolve()]
    monkeypatch.undo()
    abort_rebase(fork)
    assert not wt.exists()
    assert paused_rebase(fork) is None
    assert git(fork, "for-each-ref") == refs
    assert git(fork, "worktree", "list").count("\n") == 0  # only the fork itself

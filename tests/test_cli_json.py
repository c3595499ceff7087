"""``--json`` callers always get exactly one JSON document on stdout, errors included.

The incident: an exit-2 error (a bad --repo, a DIR that is not the package's parent) printed a line
on stderr and no JSON, so a CI step parsing stdout crashed on an empty document.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def hqp(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_an_exit_2_error_is_a_json_document_too(tmp_path: Path) -> None:
    proc = hqp("check", "--json", "--repo", tmp_path)
    assert proc.returncode == 2
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False and doc["exit_code"] == 2
    assert "is not a hyperqwen-patches repository" in doc["error"] and doc["hint"]
    assert proc.stderr.startswith("error: ")  # the person reading stderr still gets the line


def test_a_command_that_printed_its_document_gets_no_second_one(tmp_path: Path) -> None:
    """apply --json of a patch that does not apply: its own record, then exit 1, one document."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "f.py").write_text("a\n")
    patch = tmp_path / "p.patch"
    patch.write_text("--- a/vllm/f.py\n+++ b/vllm/f.py\n@@ -1 +1 @@\n-x\n+y\n")
    proc = hqp("apply", tmp_path, "--patch", patch, "--json")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)  # one document: a second would make this raise
    assert doc["ok"] is False and "patches" in doc


def test_an_option_error_of_the_argument_parser_is_a_json_document_too() -> None:
    for argv in (["check", "--json", "--nope"], ["apply", "x", "--json", "--max-offset", "-1"]):
        proc = hqp(*argv)
        assert proc.returncode == 2, argv
        doc = json.loads(proc.stdout)
        assert doc["ok"] is False and doc["exit_code"] == 2
        assert "Usage:" in proc.stderr  # click's message for the person
    plain = hqp("check", "--nope")
    assert plain.returncode == 2 and plain.stdout == ""  # no --json: no document

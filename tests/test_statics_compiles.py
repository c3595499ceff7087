"""Compiles: a row that breaks Python is named; a clean series is silent."""

from __future__ import annotations

from pathlib import Path

from test_statics_provenance import make_repo, static_findings

from hyperqwen_patches.statics.compiles import check_compiles

COMPILES = check_compiles
PRISTINE = {"vllm/a.py": b"def f(x):\n    return x\n\n\ndef g():\n    return 1\n"}


def test_a_syntax_error_names_the_row_and_its_line(tmp_path: Path) -> None:
    broken = PRISTINE["vllm/a.py"].replace(b"    return x\n", b"    y = (x +\n    return x\n")
    root = make_repo(
        tmp_path, PRISTINE, [("fine", {"vllm/b.py": b"ok = 1\n"}), ("bad", {"vllm/a.py": broken})]
    )
    [finding] = static_findings(root, COMPILES)
    assert finding.check == "compiles" and finding.severity == "error"
    # Python reports the unclosed bracket on the row's own line here.
    assert finding.subject == "row bad: vllm/a.py:2"
    assert "does not compile" in finding.message


def test_an_error_reported_on_a_pristine_line_blames_the_row_line_above(tmp_path: Path) -> None:
    # The row adds a lone `else:` branch body-less at the end of f; Python reports the next line.
    text = PRISTINE["vllm/a.py"].replace(b"    return x\n", b"    return x\n    if x:\n")
    root = make_repo(tmp_path, PRISTINE, [("dangling", {"vllm/a.py": text})])
    [finding] = static_findings(root, COMPILES)
    assert finding.subject == "row dangling: vllm/a.py:3"
    assert "reported at line" in finding.message


def test_return_outside_a_function_is_caught_beyond_the_parser(tmp_path: Path) -> None:
    root = make_repo(tmp_path, PRISTINE, [("ret", {"vllm/c.py": b"x = 1\nreturn x\n"})])
    [finding] = static_findings(root, COMPILES)
    assert (
        finding.subject == "row ret: vllm/c.py:2" and "'return' outside function" in finding.message
    )


def test_clean_rows_compile(tmp_path: Path) -> None:
    text = PRISTINE["vllm/a.py"].replace(b"    return 1\n", b"    return f(2)\n")
    root = make_repo(tmp_path, PRISTINE, [("ok", {"vllm/a.py": text})])
    assert static_findings(root, COMPILES) == []


def test_a_file_that_never_compiled_is_not_the_series_doing(tmp_path: Path) -> None:
    pristine = {"vllm/data.py": b"line 1 is not python\nline 2\n"}
    root = make_repo(
        tmp_path, pristine, [("edit", {"vllm/data.py": b"line 1 is not python\nours\n"})]
    )
    assert static_findings(root, COMPILES) == []

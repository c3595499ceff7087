"""The flags a row's ``git_apply`` may state (series/gitapplyflags.py): a whitelist of flags that
change how git reads a patch, never what it writes or where; and the flags ``adopt`` reads from a
series' own check script."""

from __future__ import annotations

import pytest

from hyperqwen_patches.series.gitapplyflags import (
    check_args,
    flag_problem,
    flags_in_command,
    problems,
)


@pytest.mark.parametrize(
    "flag",
    ["--ignore-whitespace", "--ignore-space-change", "--recount", "--whitespace=nowarn", "-C2"],
)
def test_safe_flags_may_be_stated(flag: str) -> None:
    assert flag_problem(flag) is None


@pytest.mark.parametrize(
    "flag",
    [
        "--index",
        "--3way",
        "--unsafe-paths",
        "--directory=x",
        "--reject",
        "-R",
        "--whitespace=fix",
        "-p0",
        "--check",
        "-C",
        "--exclude=*.py",
    ],
)
def test_unsafe_flags_are_refused(flag: str) -> None:
    message = flag_problem(flag)
    assert message is not None and repr(flag) in message


def test_a_flag_given_twice_is_refused_by_its_index() -> None:
    assert problems(["--recount", "--whitespace=warn", "--whitespace=nowarn"]) == [
        (2, "'--whitespace=nowarn' is given twice (first at [1])")
    ]


def test_check_args_put_the_rows_flags_before_the_strip_level() -> None:
    assert check_args(()) == ("apply", "--check", "--whitespace=error", "-p1")
    assert check_args(("--ignore-whitespace",)) == (
        "apply",
        "--check",
        "--whitespace=error",
        "--ignore-whitespace",
        "-p1",
    )
    assert check_args(("--whitespace=nowarn",)) == (
        "apply",
        "--check",
        "--whitespace=nowarn",
        "-p1",
    )


@pytest.mark.parametrize(
    ("line", "kept", "unstated"),
    [
        ('  git apply --check --ignore-whitespace -p1 "$here/$p"', ("--ignore-whitespace",), ()),
        ("git apply --check $f", (), ()),
        ("git apply -p 1 --check -C 2 --recount x.patch || exit 1", ("-C2", "--recount"), ()),
        (
            "git apply --check --directory=vllm --ignore-space-change p",
            ("--ignore-space-change",),
            ("--directory=vllm",),
        ),
        ("git apply --check p && git apply --index p", (), ()),
        ("echo 'git apply --check --recount' # a message", (), ()),
    ],
)
def test_flags_read_from_a_scripts_line(
    line: str, kept: tuple[str, ...], unstated: tuple[str, ...]
) -> None:
    assert flags_in_command(line) == (kept, unstated)


def test_the_manifest_schema_allows_the_same_flags() -> None:
    import json
    from pathlib import Path

    from hyperqwen_patches.series.gitapplyflags import SAFE_FLAGS, WHITESPACE_MODES

    schema = json.loads(
        (Path(__file__).parent.parent / "src/hyperqwen_patches/manifest.schema.json").read_text()
    )
    listed = schema["$defs"]["row"]["properties"]["git_apply"]["oneOf"][1]["items"]["anyOf"]
    assert listed[0]["enum"] == [*SAFE_FLAGS, *(f"--whitespace={m}" for m in WHITESPACE_MODES)]
    assert listed[1]["pattern"] == "^-C[0-9]+$"

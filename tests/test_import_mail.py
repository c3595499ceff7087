"""What ``import`` reads of a patch file's mail header without a git process, held to git's own
answers: a plain RFC 2822 date (``git var`` with GIT_AUTHOR_DATE) and the message clean-up
(``git stripspace``), on seeded random inputs."""

from __future__ import annotations

import os
import random
import subprocess

from hyperqwen_patches.fork.importing import _rfc2822_date, stripspace

DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]


def git_date(value: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "x",
        "GIT_AUTHOR_EMAIL": "x@x",
        "GIT_AUTHOR_DATE": value,
    }
    out = subprocess.run(["git", "var", "GIT_AUTHOR_IDENT"], env=env, capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return out.strip().rsplit("> ", 1)[-1]


def test_plain_dates_read_as_git_reads_them() -> None:
    rng = random.Random(41)
    read = 0
    for _ in range(150):
        value = (
            (f"{rng.choice(DAYS)}, " if rng.random() < 0.8 else "")
            + f"{rng.randint(1, 31)} {rng.choice(MONTHS)} {rng.randint(1970, 2099)} "
            + f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d} "
            + f"{rng.choice('+-')}{rng.randint(0, 14):02d}{rng.choice([0, 15, 30, 45]):02d}"
        )
        ours = _rfc2822_date(value.encode())
        if ours is None:  # a day the month lacks: left to git
            continue
        read += 1
        assert ours == git_date(value), value
    assert read > 100


def test_other_shapes_are_left_to_git() -> None:
    for value in ("2026-12-04 10:00:00 +0100", "Thu, 31 Feb 2026 10:00:00 +0100", "yesterday"):
        assert _rfc2822_date(value.encode()) is None


def test_stripspace_is_gits() -> None:
    rng = random.Random(7)
    pieces = [
        "word",
        "",
        " ",
        "\t",
        "\r",
        "\x0b",
        "\x0c",
        "  indented",
        "# comment",
        "é",
        "\n",
        "\n\n",
    ]
    for _ in range(300):
        message = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 25))).encode()
        theirs = subprocess.run(["git", "stripspace"], input=message, capture_output=True,
                                check=True).stdout  # fmt: skip
        assert stripspace(message) == theirs, message

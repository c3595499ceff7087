"""The fast path (``commands/argv.py``) against Typer and click themselves.

The fast path may only accept what Typer accepts, with the same values; everything else must go to
Typer. So: the option table is what the Typer app defines now (regenerated and compared), and on
generated command lines the keyword arguments the fast path would pass are the ones Typer passes to a
recording stand-in with the same signature, or the fast path declines. A few command lines it must
serve itself, so that a fast path that declines everything fails here too.
"""

from __future__ import annotations

import functools
import inspect
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main

from hyperqwen_patches.cli import argtable_source
from hyperqwen_patches.commands import argtable
from hyperqwen_patches.commands.argv import command_name, parse

TABLE = argtable.TABLE
ROOT = Path(__file__).resolve().parents[1]


def test_the_table_matches_the_typer_app() -> None:
    text = (ROOT / "src/hyperqwen_patches/commands/argtable.py").read_text(encoding="utf-8")
    assert text == argtable_source(), (
        "commands/argtable.py is stale: run "
        '.venv/bin/python -c "from hyperqwen_patches.cli import write_argtable; write_argtable()"'
    )


def test_every_command_is_in_the_table() -> None:
    """A command the generator left out would silently lose the fast path; today none is."""
    from hyperqwen_patches.cli import build_app

    group: Any = typer.main.get_command(build_app())
    assert sorted(group.commands) == sorted(TABLE)


def typer_kwargs(command: str, args: list[str]) -> dict[str, Any] | None:
    """What Typer passes to the command's function for ``args`` (None: Typer refused them)."""
    spec = TABLE[command]
    module = __import__(spec["module"], fromlist=["_"])
    real = getattr(module, spec["function"])
    got: dict[str, Any] = {}

    @functools.wraps(real)
    def recorder(**kwargs: Any) -> None:
        got.update(kwargs)

    module.typer = typer  # as commands.register does: the signature strings name typer
    app = typer.Typer(add_completion=False)
    app.callback()(lambda: None)
    app.command(command)(recorder)
    try:
        typer.main.get_command(app).main([command, *args], standalone_mode=False)
    except Exception:  # click's UsageError, BadParameter, ...: Typer refused
        return None
    return got


def fast_kwargs(command: str, args: list[str]) -> dict[str, Any] | None:
    """The fast path's call with the function's defaults filled in, as Typer fills them."""
    call = parse([command, *args])
    if call is None:
        return None
    spec = TABLE[command]
    real = getattr(__import__(spec["module"], fromlist=["_"]), spec["function"])
    params = inspect.signature(real).parameters
    return {name: call.kwargs.get(name, p.default) for name, p in params.items()}


def sample_value(param: dict[str, Any], rng: random.Random, tmp: Path) -> str:
    if param["type"] == "int":
        return rng.choice(["0", "3", "007", "12", "-1", "x", "1_0", " 4", "+2", "٣"])
    if param["type"] == "path":
        return rng.choice(["a", "dir/b", "", ".", "with space", "ü", str(tmp / "file"), str(tmp)])
    return rng.choice(["v", "0.29.0", "", "a b", "--", "-x", "é", "x=y"])


def sample_line(command: str, rng: random.Random, tmp: Path) -> list[str]:
    spec = TABLE[command]
    words: list[str] = []
    positional: list[str] = []
    for param in spec["params"]:
        if param["kind"] == "argument":
            if rng.random() < 0.9:
                positional.append(sample_value(param, rng, tmp))
            continue
        for _ in range(rng.choice([0, 0, 1, 1, 2])):
            opt = rng.choice(param["opts"] + param["secondary"])
            if param["flag"]:
                words.append(opt if rng.random() < 0.95 else f"{opt}=1")
            elif rng.random() < 0.3:
                words.append(f"{opt}={sample_value(param, rng, tmp)}")
            else:
                words += [opt, sample_value(param, rng, tmp)]
    if rng.random() < 0.05:
        words.append(rng.choice(["--help", "-h", "--nope", "-v", "extra"]))
    for word in positional:  # arguments anywhere among the options, as click allows
        words.insert(rng.randrange(len(words) + 1), word)
    if rng.random() < 0.1 and positional:
        words = [w for w in words if w not in positional] + ["--", *positional]
    return words


@pytest.mark.parametrize("command", sorted(TABLE))
def test_the_fast_path_passes_what_typer_passes(command: str, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    rng = random.Random(f"argv-{command}")
    served = 0
    cwd = os.getcwd()
    os.chdir(tmp_path)  # relative sample paths ("a", "dir/b") resolve the same for both
    try:
        for _ in range(300):
            args = sample_line(command, rng, tmp_path)
            fast = fast_kwargs(command, args)
            if fast is None:
                continue
            served += 1
            assert fast == typer_kwargs(command, args), f"{command} {args}"
    finally:
        os.chdir(cwd)
    assert served > 30, f"the fast path served only {served} of 300 lines of {command}"


@pytest.mark.parametrize(
    "args",
    [
        ["apply", "site", "--patch", "a.patch", "--patch=b.patch", "--json"],
        ["-v", "apply", "site", "--max-offset", "3"],
        ["check"],
        ["check", "--json", "--repo", "."],
        ["list", "--json"],
        ["status", "site"],
        ["diff", "a", "b", "--no-interdiff"],
        ["port", "--to", "0.30.0", "--to=0.31.0"],
    ],
)
def test_plain_lines_are_served_without_typer(args: list[str]) -> None:
    call = parse(args)
    assert call is not None and call.command == command_name(args)


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--help"],
        ["apply", "-h"],
        ["apply"],  # DIR missing: Typer says so
        ["apply", "a", "b"],
        ["apply", "site", "--max-offset", "-1"],
        ["apply", "site", "--max-offset"],
        ["apply", "site", "--json=yes"],
        ["apply", "site", "--jso"],  # click has no prefix matching; neither has the fast path
        ["diff"],  # no_args_is_help
        ["port"],
        ["nosuch"],
        ["--version", "apply", "x"],
        ["apply", "site\x1b[31m"],
    ],
)
def test_other_lines_go_to_typer(args: list[str]) -> None:
    assert parse(args) is None


def test_a_directory_option_naming_a_file_goes_to_typer(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    assert parse(["list", "--repo", str(tmp_path / "f")]) is None
    assert parse(["list", "--repo", str(tmp_path)]) is not None


PROBE = """
import atexit, sys
listing = sys.argv.pop(1)
atexit.register(lambda: open(listing, "w").write("\\n".join(sorted(sys.modules))))
sys.argv[0] = "hyperqwen-patches"
from hyperqwen_patches.cli import main
main()
"""


def run(tmp: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run the CLI as the console script does; also the modules it had imported when it exited."""
    listing = tmp / "modules.txt"
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(listing), *args],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    return proc, set(listing.read_text().split())


def test_version_and_a_plain_command_do_not_import_typer(tmp_path: Path) -> None:
    version, mods = run(tmp_path, "--version")
    assert version.returncode == 0 and version.stdout.startswith("hyperqwen-patches ")
    assert not {
        m
        for m in mods - {"hyperqwen_patches.cli"}
        if m.startswith(("typer", "typing", "hyperqwen_patches."))
    }
    run(tmp_path, "list", "--json")  # the first run caches the manifest's model
    listed, mods = run(tmp_path, "list", "--json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "hyperqwen_patches.commands.list_" in mods
    assert not {m for m in mods if m.startswith(("typer", "click", "rich", "yaml"))}
    assert "hyperqwen_patches.commands.apply" not in mods  # no command pays for another's imports


def test_a_plain_apply_imports_no_typing_dataclasses_inspect_or_hashlib(tmp_path: Path) -> None:
    """The modules an `apply` start pays for and does not need (docs/performance.md, "A
    real-shaped series"): typing, dataclasses and its inspect, hashlib's OpenSSL."""
    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm/f.py").write_text("a\n")
    patch = tmp_path / "p.patch"
    patch.write_text("--- a/vllm/f.py\n+++ b/vllm/f.py\n@@ -1 +1 @@\n-a\n+b\n")
    applied, mods = run(tmp_path, "apply", str(site), "--patch", str(patch))
    assert applied.returncode == 0, applied.stderr[-2000:]
    assert (site / "vllm/f.py").read_text() == "b\n"
    assert "hyperqwen_patches.commands.apply" in mods
    assert not mods & {"typing", "dataclasses", "inspect", "hashlib", "_hashlib"}
    # The write journal needs neither json nor base64, a one-file write no threads; json comes with
    # a manifest (its parsed model is cached as JSON), and this apply has none (--patch).
    spared = {"json", "base64", "threading"}
    assert not mods & spared, mods & spared


def test_help_and_usage_errors_still_come_from_typer(tmp_path: Path) -> None:
    helped, mods = run(tmp_path, "apply", "--help")
    assert helped.returncode == 0
    assert "Usage:" in helped.stdout and "--check-applied" in helped.stdout
    assert "hyperqwen_patches.commands.check" not in mods  # only the named command is registered
    wrong, _ = run(tmp_path, "apply", "x", "--max-offset", "-3")
    assert wrong.returncode == 2 and "--max-offset" in wrong.stderr
    everything, _ = run(tmp_path, "--help")
    assert everything.returncode == 0 and all(c in everything.stdout for c in TABLE)


def test_shell_completion_is_answered_by_typer(tmp_path: Path) -> None:
    """Typer's completion protocol (what --install-completion sets up) reaches Typer, not the fast
    path: command names and a command's options complete."""

    def complete(words: str, cword: int) -> list[str]:
        env = {**os.environ, "_HYPERQWEN_PATCHES_COMPLETE": "complete_bash",
               "COMP_WORDS": words, "COMP_CWORD": str(cword)}  # fmt: skip
        proc = subprocess.run(
            [sys.executable, "-c", "import sys; sys.argv[0] = 'hyperqwen-patches'; "
             "from hyperqwen_patches.cli import main; main()"],
            env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.split()

    assert complete("hyperqwen-patches ap", 1) == ["apply"]
    assert "--check-applied" in complete("hyperqwen-patches apply site --ch", 3)
    assert set(complete("hyperqwen-patches ", 1)) >= set(TABLE)

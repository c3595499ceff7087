"""Knob hygiene: bare reads, reads through vllm.envs, both halves of a registration, the compile
factors' ignore list (found by parsing), the manifest's extra prefixes, the registry count."""

from __future__ import annotations

from pathlib import Path

from test_statics_provenance import make_repo, static_findings

from hyperqwen_patches.checks.pipeline import run_check
from hyperqwen_patches.statics.knobs import check_knobs

KNOBS = check_knobs

ENVS = b"""import os
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    VLLM_OLD: int = 0
    VLLM_PORT: int = 0

environment_variables: dict[str, Callable[[], Any]] = {
    "VLLM_OLD": lambda: int(os.getenv("VLLM_OLD", "0")),
    "VLLM_PORT": lambda: int(os.getenv("VLLM_PORT", "0")),
}


def compile_factors() -> dict[str, object]:
    ignored_factors: set[str] = {
        "VLLM_PORT",
    }
    return {k: v() for k, v in environment_variables.items() if k not in ignored_factors}
"""
USER = b"import os\n\nfrom vllm import envs\n\n\ndef f():\n    return envs.VLLM_OLD\n"


def register(knob: str, *, annotate: bool = True, ignore: bool = False) -> bytes:
    text = ENVS
    if annotate:
        text = text.replace(
            b"    VLLM_PORT: int = 0\n",
            b"    VLLM_PORT: int = 0\n    %s: int = 0\n" % knob.encode(),
        )
    text = text.replace(
        b"}\n\n\ndef compile",
        b'    "%s": lambda: int(os.getenv("%s", "0")),\n}\n\n\ndef compile'
        % (knob.encode(), knob.encode()),
    )
    if ignore:
        text = text.replace(
            b'        "VLLM_PORT",\n', b'        "VLLM_PORT",\n        "%s",\n' % knob.encode()
        )
    return text


def tree() -> dict[str, bytes]:
    return {"vllm/envs.py": ENVS, "vllm/user.py": USER}


def test_a_registered_knob_read_through_envs_passes(tmp_path: Path) -> None:
    user = USER + b"\n\ndef g():\n    return envs.VLLM_NEW\n"
    rows = [("reg", {"vllm/envs.py": register("VLLM_NEW")}), ("use", {"vllm/user.py": user})]
    assert static_findings(make_repo(tmp_path, tree(), rows), KNOBS) == []


def test_bare_reads_are_errors_in_every_spelling(tmp_path: Path) -> None:
    user = USER + (
        b"\n\ndef g():\n"
        b'    a = os.environ.get("VLLM_A")\n'
        b'    b = os.getenv("KVARN_B", "1")\n'
        b'    c = os.environ["VLLM_C"]\n'
        b'    d = "VLLM_D" in os.environ\n'
        b'    e = os.environ.get("HOME")\n'  # not a knob
        b"    return a, b, c, d, e\n"
    )
    root = make_repo(tmp_path, tree(), [("bare", {"vllm/user.py": user})])
    found = static_findings(root, KNOBS)
    assert [(f.subject, f.message.split(" ")[0]) for f in found] == [
        ("row bare: vllm/user.py:11", "VLLM_A"),
        ("row bare: vllm/user.py:12", "KVARN_B"),
        ("row bare: vllm/user.py:13", "VLLM_C"),
        ("row bare: vllm/user.py:14", "VLLM_D"),
    ]
    assert all(
        f.severity == "error" and "outside the compile cache key" in f.message for f in found
    )
    assert "no row registers it" in found[0].message


def test_an_unregistered_knob_read_through_envs_is_an_error(tmp_path: Path) -> None:
    user = USER + b"\n\ndef g():\n    return envs.VLLM_MISSING\n"
    [finding] = static_findings(
        make_repo(tmp_path, tree(), [("use", {"vllm/user.py": user})]), KNOBS
    )
    assert finding.subject == "row use: vllm/user.py:11"
    assert "VLLM_MISSING is read through vllm.envs but no row registers it" in finding.message


def test_half_registrations_and_ignored_knobs(tmp_path: Path) -> None:
    text = register("VLLM_NOTYPE", annotate=False)
    text = text.replace(
        b"    VLLM_PORT: int = 0\n", b"    VLLM_PORT: int = 0\n    VLLM_NOENTRY: int = 0\n"
    )
    root = make_repo(tmp_path, tree(), [("half", {"vllm/envs.py": text})])
    found = static_findings(root, KNOBS)
    assert sorted(f.message[:40] for f in found) == [
        "VLLM_NOENTRY is annotated but has no env",
        "VLLM_NOTYPE is registered without its an",
    ]


def test_a_row_knob_on_the_ignore_list_is_an_error(tmp_path: Path) -> None:
    root = make_repo(
        tmp_path, tree(), [("ign", {"vllm/envs.py": register("VLLM_GEN", ignore=True)})]
    )
    [finding] = static_findings(root, KNOBS)
    assert finding.message.startswith("VLLM_GEN is on compile_factors' ignore list (row ign)")
    assert finding.detail == "environment_variables: 2 entries before the series, 3 after"


def test_manifest_prefixes_and_environ_handed_on(tmp_path: Path) -> None:
    user = USER + (
        b"\n\ndef g(env=None):\n"
        b"    env = os.environ if env is None else env\n"
        b'    return env.get("MYAPP_X"), os.getenv("MYAPP_Y")\n'
    )
    root = make_repo(
        tmp_path, tree(), [("mine", {"vllm/user.py": user})], extra="knob_prefixes: [MYAPP_]\n"
    )
    found = static_findings(root, KNOBS)
    assert [(f.severity, f.subject, f.message[:40]) for f in found] == [
        ("error", "row mine: vllm/user.py:12", "MYAPP_Y is read from the environment dir"),
        ("warning", "row mine: vllm/user.py:11", "os.environ is handed on as a value where"),
    ]
    # Without the manifest's prefix those names are not knobs.
    root2 = make_repo(tmp_path / "b", tree(), [("mine", {"vllm/user.py": user})])
    assert static_findings(root2, KNOBS) == []


def test_check_notes_the_registry_count_before_and_after(tmp_path: Path) -> None:
    """check shows the registry's size before and after the series as a note, which never fails it."""
    user = USER + b"\n\ndef g():\n    return envs.VLLM_NEW\n"
    rows = [("reg", {"vllm/envs.py": register("VLLM_NEW")}), ("use", {"vllm/user.py": user})]
    report = run_check(make_repo(tmp_path, tree(), rows), pipeline=(KNOBS,))
    notes = [f for f in report.findings if f.severity == "note"]
    assert [n.message for n in notes] == [
        "environment_variables: 2 entries before the series, 3 after (rows register: VLLM_NEW)"
    ]
    assert report.exit_code == 0


def test_a_declared_runtime_knob_may_stay_off_the_key(tmp_path: Path) -> None:
    """A real series kept four runtime-only knobs (a watchdog timeout, a log interval...) off the
    compile key on purpose, since hashing them cost a cold torch.compile each time; check could
    never pass on it. Declared with a reason, the knob is allowed and named in the note."""
    extra = "runtime_knobs:\n  - name: VLLM_GEN\n    reason: read by the watchdog thread only\n"
    root = make_repo(
        tmp_path,
        tree(),
        [("ign", {"vllm/envs.py": register("VLLM_GEN", ignore=True)})],
        extra=extra,
    )
    assert static_findings(root, KNOBS) == []
    [note] = [f for f in run_check(root, pipeline=(KNOBS,)).findings if f.severity == "note"]
    assert "declared runtime-only, off the compile key: VLLM_GEN (row ign)" in note.message


def test_a_runtime_knob_no_row_keeps_off_the_key_is_a_stale_waiver(tmp_path: Path) -> None:
    extra = "runtime_knobs:\n  - name: VLLM_GEN\n    reason: read by the watchdog thread only\n"
    root = make_repo(
        tmp_path, tree(), [("reg", {"vllm/envs.py": register("VLLM_GEN")})], extra=extra
    )
    [finding] = static_findings(root, KNOBS)
    assert finding.severity == "error"
    assert finding.subject.startswith("patches/manifest.yaml:")
    assert "runtime_knobs declares VLLM_GEN, but no row keeps it off" in finding.message

"""Removed names and changed signatures between two small real trees (the old pin with the series,
the target release), through the same entry point ``port`` uses."""

from __future__ import annotations

from pathlib import Path

from test_statics_provenance import make_repo

from hyperqwen_patches.series.manifest import load_manifest
from hyperqwen_patches.sources.pristine import open_pristine
from hyperqwen_patches.statics.names import check_names
from hyperqwen_patches.statics.report import StaticsReport, port_statics

LIB = b"""from enum import Enum


class Mode(Enum):
    FAST = 1
    SLOW = 2


class Base:
    def __init__(self, size):
        self.size = size

    def helper(self, a, b=2):
        return a + b


def util(x, *, scale=1):
    return x * scale


CONST = 3
"""
USER = b"""from vllm.lib import Base, util


class Worker(Base):
    def run(self):
        return 0
"""
ADDED = USER.replace(
    b"        return 0\n",
    b"        m = Mode.FAST\n"
    b"        h = self.helper(1, b=3)\n"
    b"        u = util(2, scale=CONST)\n"
    b"        w = Base(4)\n"
    b"        return m, h, u, w, self.size\n",
).replace(b"from vllm.lib import Base, util\n", b"from vllm.lib import CONST, Base, Mode, util\n")


def statics_report(
    tmp_path: Path,
    pristine: dict[str, bytes],
    rows: list[tuple[str, dict[str, bytes]]],
    target_files: dict[str, bytes],
    extra: str = "",
) -> StaticsReport:
    """port_statics of ``rows`` on ``pristine`` (0.29.0) against ``target_files`` (0.30.0)."""
    root = make_repo(tmp_path, pristine, rows, extra=extra)
    target = tmp_path / "target"
    for rel, data in target_files.items():
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        (target / rel).write_bytes(data)
    manifest = load_manifest(root)
    with (
        open_pristine(manifest.source, version="0.29.0") as old,
        open_pristine(f"dir:{target}", version="0.30.0") as new,
    ):
        return port_statics(manifest, old, new)


def run(tmp_path: Path, new_lib: bytes, extra: str = "") -> tuple[list[tuple[str, str, str]], dict]:
    pristine = {"vllm/__init__.py": b"", "vllm/lib.py": LIB, "vllm/user.py": USER}
    target = {"vllm/__init__.py": b"", "vllm/lib.py": new_lib, "vllm/user.py": USER}
    report = statics_report(tmp_path, pristine, [("use", {"vllm/user.py": ADDED})], target, extra)
    found = [(f.check, f.subject, f.message.split(":", 1)[0]) for f in report.findings]
    return found, report.stats


def test_an_unchanged_target_has_no_findings_and_says_what_it_resolved(tmp_path: Path) -> None:
    found, stats = run(tmp_path, LIB)
    assert found == []
    assert stats["signatures"]["resolved"] == 3  # self.helper, util, Base(...)
    assert stats["names"]["checked"] >= 8
    assert stats["signatures"]["calls"] == 3


def test_removed_names_are_named_with_row_file_and_line(tmp_path: Path) -> None:
    new = LIB.replace(b"    FAST = 1\n", b"    QUICK = 1\n").replace(b"CONST = 3\n", b"")
    found, stats = run(tmp_path, new)
    assert ("names", "row use: vllm/user.py:1", "from vllm.lib import CONST") in found
    assert ("names", "row use: vllm/user.py:6", "Mode.FAST") in found
    assert ("names", "row use: vllm/user.py:8", "CONST") in found
    assert stats["names"]["removed"] == 3


def test_an_accepted_name_is_not_reported(tmp_path: Path) -> None:
    new = LIB.replace(b"CONST = 3\n", b"")
    extra = "accepted_names:\n  - name: vllm.lib.CONST\n    reason: we define it ourselves\n"
    found, stats = run(tmp_path, new, extra)
    assert found == []
    assert stats["names"]["accepted"] == 2


def test_changed_signatures_missing_argument_and_removed_keyword(tmp_path: Path) -> None:
    new = (
        LIB.replace(b"def helper(self, a, b=2):", b"def helper(self, a, c, b=2):")
        .replace(b"def util(x, *, scale=1):", b"def util(x, *, factor=1):")
        .replace(b"def __init__(self, size):", b"def __init__(self, size, dtype):")
    )
    found, stats = run(tmp_path, new)
    sigs = [f for f in found if f[0] == "signatures"]
    assert [s[1] for s in sigs] == [
        "row use: vllm/user.py:7",
        "row use: vllm/user.py:8",
        "row use: vllm/user.py:9",
    ]
    assert stats["signatures"]["changed"] == 3


def test_signature_messages_say_what_no_longer_binds(tmp_path: Path) -> None:
    new = LIB.replace(b"def util(x, *, scale=1):", b"def util(x, *, factor=1):")
    pristine = {"vllm/__init__.py": b"", "vllm/lib.py": LIB, "vllm/user.py": USER}
    root = make_repo(tmp_path, pristine, [("use", {"vllm/user.py": ADDED})])
    target = tmp_path / "target"
    (target / "vllm").mkdir(parents=True)
    (target / "vllm/lib.py").write_bytes(new)
    (target / "vllm/user.py").write_bytes(USER)
    manifest = load_manifest(root)
    with (
        open_pristine(manifest.source, version="0.29.0") as old,
        open_pristine(f"dir:{target}", version="0.30.0") as new_tree,
    ):
        [finding] = port_statics(manifest, old, new_tree).findings
    assert finding.message.endswith("no parameter named scale")
    assert "util(x, *, factor=1)" in finding.detail


HOLDER = b"""from vllm.lib import Base


class Holder:
    def __init__(self):
        self.base: Base | None = None
        self.other = Base(1)

    def touch(self, b: Base):
        return 0
"""
HOLDER_ADDED = HOLDER.replace(
    b"        return 0\n",
    b"        x = b.helper(1)\n"
    b"        y = self.base.helper(2, b=1)\n"
    b"        z = self.other.helper(3)\n"
    b"        return x, y, z\n",
)


def test_annotated_parameters_and_typed_attributes_are_followed(tmp_path: Path) -> None:
    """b: Base, self.base: Base | None and self.other = Base(...) all reach Base.helper."""
    pristine = {"vllm/__init__.py": b"", "vllm/lib.py": LIB, "vllm/holder.py": HOLDER}
    root = make_repo(tmp_path, pristine, [("hold", {"vllm/holder.py": HOLDER_ADDED})])
    target = tmp_path / "target"
    (target / "vllm").mkdir(parents=True)
    (target / "vllm/lib.py").write_bytes(
        LIB.replace(b"def helper(self, a, b=2):", b"def helper(self, a, *, c, b=2):")
    )
    (target / "vllm/holder.py").write_bytes(HOLDER)
    manifest = load_manifest(root)
    with (
        open_pristine(manifest.source, version="0.29.0") as old,
        open_pristine(f"dir:{target}", version="0.30.0") as new,
    ):
        report = port_statics(manifest, old, new)
    assert report.stats["signatures"]["resolved"] == 3
    assert [(f.subject, f.message.rsplit(": ", 1)[1]) for f in report.findings] == [
        ("row hold: vllm/holder.py:10", "missing required c"),
        ("row hold: vllm/holder.py:11", "missing required c"),
        ("row hold: vllm/holder.py:12", "missing required c"),
    ]


def test_check_reports_names_a_rows_cut_against_release_had(tmp_path: Path) -> None:
    """check, pin 0.30.0: a row cut against 0.29.0 imports a function 0.30.0 dropped (real wheels,
    shared cache); a row cut against the pin is compared with nothing."""
    from hyperqwen_patches.checks.pipeline import run_check

    root = tmp_path / "repo"
    (root / "patches").mkdir(parents=True)
    probe = b"from vllm.utils.torch_utils import get_kv_cache_quant_algo_dtype\n"
    for name in ("old", "new"):
        from test_statics_provenance import diff

        (root / f"patches/{name}.patch").write_bytes(diff(f"vllm/hqp_{name}.py", None, probe))
    rows = "".join(
        f"  - name: {name}\n    patch: patches/{name}.patch\n    kind: fix\n    what: x\n"
        f'    cut_against: "{cut}"\n    retires_when: never\n'
        for name, cut in (("old", "0.29.0"), ("new", "0.30.0"))
    )
    (root / "patches/manifest.yaml").write_text(
        f'format: 1\npin: "0.30.0"\npackage: vllm\nrows:\n{rows}'
    )
    report = run_check(root, pipeline=(check_names,))
    assert [(f.subject, f.message) for f in report.findings] == [
        (
            "row old: vllm/hqp_old.py:1",
            "from vllm.utils.torch_utils import get_kv_cache_quant_algo_dtype: "
            "vllm.utils.torch_utils has no get_kv_cache_quant_algo_dtype in pypi:vllm==0.30.0 "
            "(it exists in pypi:vllm==0.29.0)",
        )
    ]


def test_port_carries_the_static_findings(tmp_path: Path) -> None:
    from hyperqwen_patches.port.run import port

    pristine = {"vllm/__init__.py": b"", "vllm/lib.py": LIB, "vllm/user.py": USER}
    root = make_repo(tmp_path, pristine, [("use", {"vllm/user.py": ADDED})])
    target = tmp_path / "target"
    (target / "vllm").mkdir(parents=True)
    (target / "vllm/lib.py").write_bytes(LIB.replace(b"CONST = 3\n", b""))
    (target / "vllm/user.py").write_bytes(USER)
    report, _ = port(root, "0.30.0", to_source=f"dir:{target}")
    statics = report.to_json()["statics"]
    assert [(f["check"], f["row"], f["line"]) for f in statics["findings"]] == [
        ("names", "use", 1),
        ("names", "use", 8),
    ]
    assert statics["counts"]["signatures"].startswith("3 calls on added lines: 3 resolved")


def test_super_calls_bind_against_the_base_class(tmp_path: Path) -> None:
    sub = USER.replace(b"        return 0\n", b"        return super().helper(1)\n")
    pristine = {"vllm/__init__.py": b"", "vllm/lib.py": LIB, "vllm/user.py": USER}
    root = make_repo(tmp_path, pristine, [("sup", {"vllm/user.py": sub})])
    target = tmp_path / "target"
    (target / "vllm").mkdir(parents=True)
    (target / "vllm/lib.py").write_bytes(
        LIB.replace(b"def helper(self, a, b=2):", b"def helper(self, a, c, b=2):")
    )
    (target / "vllm/user.py").write_bytes(USER)
    manifest = load_manifest(root)
    with (
        open_pristine(manifest.source, version="0.29.0") as old,
        open_pristine(f"dir:{target}", version="0.30.0") as new,
    ):
        report = port_statics(manifest, old, new)
    assert [(f.subject, f.message) for f in report.findings] == [
        (
            "row sup: vllm/user.py:6",
            f"super().helper(...) no longer binds on dir:{target}: missing required c",
        )
    ]


def test_port_shows_static_findings_in_its_table_and_markdown(tmp_path: Path) -> None:
    """`port` prints what the static checks found on the target release, on the terminal and in
    --markdown, next to the hunk statuses (the rows themselves still apply: only names moved)."""
    import subprocess
    import sys

    new_lib = LIB.replace(b"CONST = 3\n", b"")
    pristine = {"vllm/__init__.py": b"", "vllm/lib.py": LIB, "vllm/user.py": USER}
    root = make_repo(tmp_path, pristine, [("use", {"vllm/user.py": ADDED})])
    target = tmp_path / "target"
    (target / "vllm").mkdir(parents=True)
    (target / "vllm/__init__.py").write_bytes(b"")
    (target / "vllm/lib.py").write_bytes(new_lib)
    (target / "vllm/user.py").write_bytes(USER)
    md = tmp_path / "port.md"
    argv = [sys.executable, "-m", "hyperqwen_patches", "port", "--repo", str(root)]
    argv += ["--to", "0.30.0", "--source", f"dir:{target}", "--markdown", str(md)]
    proc = subprocess.run(argv, capture_output=True, text=True)
    # The rows apply, but the code they add would fail there: a finding, exit 1, said so.
    assert proc.returncode == 1, proc.stderr
    assert "0.30.0: 2 static error(s)" in proc.stderr
    assert "static checks against 0.30.0: 2 finding(s)" in proc.stdout
    assert "[names] row use: vllm/user.py:1: from vllm.lib import CONST" in proc.stdout
    text = md.read_text()
    assert "## Static checks against 0.30.0" in text
    assert "] row use: vllm/user.py:8: CONST" in text
    assert "- names: " in text  # the counts line comes along


WIDE_LIB = b"""def fetch(
    url,
):
    return url


CONST = 3
"""
WIDE_USER = b"""from vllm.lib import fetch


def go():
    return fetch("u")
"""


def _widening(tmp_path: Path, target_lib: bytes) -> list[tuple[str, str, str]]:
    """A row widens ``fetch`` (a new keyword on its own line; the ``def`` line stays the pin's)
    and passes the new keyword in the same row."""
    pristine = {"vllm/__init__.py": b"", "vllm/lib.py": WIDE_LIB, "vllm/user.py": WIDE_USER}
    widened = WIDE_LIB.replace(b"    url,\n", b"    url,\n    headers=None,\n")
    call = WIDE_USER.replace(b'fetch("u")', b'fetch("u", headers={})')
    rows = [("widen", {"vllm/lib.py": widened, "vllm/user.py": call})]
    target = {"vllm/__init__.py": b"", "vllm/lib.py": target_lib, "vllm/user.py": WIDE_USER}
    report = statics_report(tmp_path, pristine, rows, target)
    return [(f.check, f.subject, f.message) for f in report.findings]


def test_a_row_that_widens_a_signature_and_uses_it_is_not_an_error(tmp_path: Path) -> None:
    """The call is judged against the definition as the series leaves it on the target: the row's
    own hunk carries the new keyword there too (issue #21: 6 such false errors on a real series)."""
    assert _widening(tmp_path, WIDE_LIB.replace(b"CONST = 3", b"CONST = 4")) == []


def test_a_widening_the_target_cannot_carry_is_still_an_error(tmp_path: Path) -> None:
    """Upstream renamed the parameter the row's hunk sits on: the hunk does not apply there, so
    the target's ``fetch`` has no ``headers`` and the call does not bind."""
    found = _widening(tmp_path, WIDE_LIB.replace(b"    url,\n", b"    uri,\n"))
    assert [(c, s) for c, s, _ in found] == [("signatures", "row widen: vllm/user.py:5")]
    assert "headers" in found[0][2]


# Issue 38: on a real 18-row series, port reported "build(...) no longer binds" on 0.31.0 and 0.28.0
# though neither release changed build: the parameter came from an earlier row of the series, which
# did not carry to the target (another hunk of it conflicted), and the detail named the patched
# signature as the pin's.
TWO_ROW_LIB = WIDE_LIB.replace(b"CONST = 3\n", b"CONST = 3\nLIMIT = 10\n")


def _two_rows(tmp_path: Path, target_lib: bytes) -> StaticsReport:
    """Row 1 widens ``fetch`` (a keyword on its own line) and raises ``LIMIT``; row 2 calls ``fetch``
    with the new keyword."""
    pristine = {"vllm/__init__.py": b"", "vllm/lib.py": TWO_ROW_LIB, "vllm/user.py": WIDE_USER}
    widened = TWO_ROW_LIB.replace(b"    url,\n", b"    url,\n    headers=None,\n").replace(
        b"LIMIT = 10", b"LIMIT = 20"
    )
    call = WIDE_USER.replace(b'fetch("u")', b'fetch("u", headers={})')
    rows = [("widen", {"vllm/lib.py": widened}), ("use", {"vllm/user.py": call})]
    target = {"vllm/__init__.py": b"", "vllm/lib.py": target_lib, "vllm/user.py": WIDE_USER}
    return statics_report(tmp_path, pristine, rows, target)


def test_a_call_binding_on_an_earlier_rows_widening_is_no_error_where_upstream_kept_the_callee(
    tmp_path: Path,
) -> None:
    """The target changed LIMIT (row 1 conflicts there, so its widening is not on the target) but
    not fetch: the call binds against the series' own definition; no static error."""
    report = _two_rows(tmp_path, TWO_ROW_LIB.replace(b"LIMIT = 10", b"LIMIT = 11"))
    assert [(f.check, f.subject) for f in report.findings] == []
    stats = report.stats["signatures"]
    assert stats["skip: signature unchanged upstream (the series' own definition)"] == 1


def test_a_genuinely_removed_parameter_is_still_an_error_naming_both_definitions(
    tmp_path: Path,
) -> None:
    """fetch lost a parameter upstream that the pin had (not one a row gave it): an error, and the
    detail says which definition each side bound against."""
    lib = WIDE_LIB.replace(b"    url,\n", b"    url,\n    timeout=1,\n")
    pristine = {"vllm/__init__.py": b"", "vllm/lib.py": lib, "vllm/user.py": WIDE_USER}
    call = WIDE_USER.replace(b'fetch("u")', b'fetch("u", timeout=2)')
    target = {"vllm/__init__.py": b"", "vllm/lib.py": WIDE_LIB, "vllm/user.py": WIDE_USER}
    report = statics_report(tmp_path, pristine, [("use", {"vllm/user.py": call})], target)
    [finding] = report.findings
    assert finding.subject == "row use: vllm/user.py:5"
    assert finding.message.endswith("no parameter named timeout")
    old, new = finding.detail.splitlines()
    assert old.endswith("vllm/lib.py:1 (the release's own): fetch(url, timeout=1)")
    assert new.endswith("vllm/lib.py:1 (the release's own): fetch(url)")
    assert "0.29.0" in old or "pristine" in old


def test_a_finding_names_the_row_whose_definition_the_call_bound_against(tmp_path: Path) -> None:
    """Upstream renamed the parameter row 1's hunk sits on: still an error (the callee changed),
    and the old side is named as row widen leaves it."""
    report = _two_rows(tmp_path, TWO_ROW_LIB.replace(b"    url,\n", b"    uri,\n"))
    [finding] = report.findings
    assert finding.subject == "row use: vllm/user.py:5"
    old, new = finding.detail.splitlines()
    assert "vllm/lib.py:1 as row widen leaves it: fetch(url, headers=None)" in old
    assert new.endswith("vllm/lib.py:1 (the release's own): fetch(uri)")


def test_a_class_call_names_the_init_it_bound_against(tmp_path: Path) -> None:
    new = LIB.replace(b"def __init__(self, size):", b"def __init__(self, size, dtype):")
    pristine = {"vllm/__init__.py": b"", "vllm/lib.py": LIB, "vllm/user.py": USER}
    target = {"vllm/__init__.py": b"", "vllm/lib.py": new, "vllm/user.py": USER}
    report = statics_report(tmp_path, pristine, [("use", {"vllm/user.py": ADDED})], target)
    [finding] = [f for f in report.findings if f.check == "signatures"]
    old, new_side = finding.detail.splitlines()
    assert old.endswith("vllm/lib.py:10 (the release's own): __init__(self, size)")
    assert new_side.endswith("vllm/lib.py:10 (the release's own): __init__(self, size, dtype)")

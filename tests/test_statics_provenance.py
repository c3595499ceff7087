"""Line provenance through the series (statics/provenance.py), and the helpers the other static-check
tests share: a small real repository (manifest, patch files made by difflib) on a ``dir:`` pristine
tree, checked with the real ``check`` pipeline."""

from __future__ import annotations

import difflib
from pathlib import Path

from hyperqwen_patches.checks.context import CheckFunction, Finding
from hyperqwen_patches.checks.pipeline import run_check
from hyperqwen_patches.engine.applying import Policy, apply_series
from hyperqwen_patches.engine.patchscan import parse_patch
from hyperqwen_patches.statics.compiles import check_compiles
from hyperqwen_patches.statics.gitapply import check_git_apply
from hyperqwen_patches.statics.knobs import check_knobs
from hyperqwen_patches.statics.names import check_names
from hyperqwen_patches.statics.provenance import trace
from hyperqwen_patches.statics.signatures import check_signatures
from hyperqwen_patches.statics.whitespace import check_whitespace

STATICS = (
    check_compiles,
    check_knobs,
    check_names,
    check_signatures,
    check_whitespace,
    check_git_apply,
)


def diff(path: str, old: bytes | None, new: bytes) -> bytes:
    a = old.splitlines(keepends=True) if old is not None else []
    head = f"diff --git a/{path} b/{path}\n".encode()
    if old is None:
        head += b"new file mode 100644\n"
    body = difflib.diff_bytes(
        difflib.unified_diff,
        a,
        new.splitlines(keepends=True),
        b"/dev/null" if old is None else f"a/{path}".encode(),
        f"b/{path}".encode(),
        n=3,
    )
    return head + b"".join(body)


def make_repo(
    tmp_path: Path,
    pristine: dict[str, bytes],
    rows: list[tuple[str, dict[str, bytes]]],
    *,
    extra: str = "",
    row_extra: dict[str, str] | None = None,
) -> Path:
    """A repository whose rows change ``pristine`` in turn (each row: path -> content after it)."""
    tree = tmp_path / "pristine"
    for rel, data in pristine.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(data)
    root = tmp_path / "repo"
    (root / "patches").mkdir(parents=True)
    state = dict(pristine)
    entries = []
    for i, (name, files) in enumerate(rows, 1):
        patch = b"".join(diff(p, state.get(p), data) for p, data in files.items())
        state.update(files)
        rel = f"patches/{i:04d}-{name}.patch"
        (root / rel).write_bytes(
            b"From: t <t@example.invalid>\nSubject: [PATCH] x\n\n---\n" + patch
        )
        more = (row_extra or {}).get(name, "")
        entries.append(
            f"  - name: {name}\n    patch: {rel}\n    kind: fix\n    what: x\n"
            f'    cut_against: "0.29.0"\n    retires_when: never\n{more}'
        )
    (root / "patches/manifest.yaml").write_text(
        f'format: 1\npin: "0.29.0"\npackage: vllm\nsource: dir:{tree}\n{extra}rows:\n'
        + "".join(entries)
    )
    return root


def static_findings(root: Path, *targets: CheckFunction) -> list[Finding]:
    report = run_check(root, pipeline=targets or STATICS)
    assert not [f for f in report.findings if f.severity == "problem"], report.findings
    # Notes are information (the registry count), not findings; test_statics_knobs asserts them.
    return [f for f in report.findings if f.severity != "note"]


def test_each_line_names_the_row_that_wrote_it(tmp_path: Path) -> None:
    pristine = b"".join(b"line %d\n" % i for i in range(1, 21))
    one = pristine.replace(b"line 5\n", b"line 5\nrow one a\nrow one b\n")
    two = one.replace(b"line 15\n", b"row two\n").replace(b"row one b\n", b"row one b\nrow two b\n")
    root = make_repo(
        tmp_path,
        {"vllm/a.py": pristine},
        [("one", {"vllm/a.py": one}), ("two", {"vllm/a.py": two})],
    )
    patches = [
        parse_patch((root / f"patches/{n}").read_bytes(), name=n.split("-", 1)[1][:-6])
        for n in ("0001-one.patch", "0002-two.patch")
    ]
    tree = tmp_path / "pristine"

    def read(path: bytes) -> bytes | None:
        file = tree / path.decode()
        return file.read_bytes() if file.exists() else None

    result = apply_series(patches, read, Policy())
    prov = trace(patches, result, read)
    assert prov.content[b"vllm/a.py"] == two
    assert not prov.untraced
    owners = {
        text.decode().strip(): prov.owner(b"vllm/a.py", n)
        for n, text in enumerate(two.splitlines(), 1)
    }
    assert owners["row one a"] == "one" and owners["row one b"] == "one"
    assert owners["row two"] == "two" and owners["row two b"] == "two"
    assert owners["line 1"] is None and owners["line 20"] is None
    assert sum(1 for _ in prov.added_lines(b"vllm/a.py")) == 4


def test_a_created_file_belongs_to_its_row(tmp_path: Path) -> None:
    root = make_repo(
        tmp_path, {"vllm/a.py": b"x = 1\n"}, [("new", {"vllm/b.py": b"y = 2\nz = 3\n"})]
    )
    assert static_findings(root) == []

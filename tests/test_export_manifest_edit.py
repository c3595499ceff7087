"""Export edits the manifest's text scalar by scalar: comments, order and quoting survive."""

from __future__ import annotations

from pathlib import Path

import yaml

from hyperqwen_patches.fork.exportplan import ExportPlan
from hyperqwen_patches.fork.manifestedit import edit_manifest

OLD = "1" * 40
NEW = "a" * 40
BASE = "b" * 40

TEXT = f"""\
# header comment
format: 1
pin: "0.29.0"
package: vllm
export_points:
  - name: qwen38   # the main fork
    branch: qwen38/0.29
    commit: '{OLD}'
rows:
  # first row
  - name: one
    kind: fix
    what: "One."
    patch: patches/one.patch
    cut_against: "0.29.0"
    retires_when: never
    export_point: qwen38
    commit: {OLD}
  - name: two
    kind: fix
    what: "Two."
    patch: patches/two.patch
    cut_against: "0.29.0"
    retires_when: never
retirements: []  # none yet
"""


def plan(**kw: object) -> ExportPlan:
    p = ExportPlan(Path("."))
    for key, value in kw.items():
        setattr(p, key, value)
    return p


def test_commit_fields_replaced_and_inserted_keeping_everything_else() -> None:
    out = edit_manifest(
        TEXT.encode(),
        plan(
            commit_updates={"one": NEW, "two": NEW},
            point_of={"two": "qwen38"},
            point_updates={"qwen38": (BASE, NEW)},
        ),
        [],
    ).decode()
    expected = TEXT.replace(f"commit: '{OLD}'", f'commit: "{NEW}"').replace(
        f"commit: {OLD}", f'commit: "{NEW}"'
    )
    expected = expected.replace(
        f'    commit: "{NEW}"\nrows:', f'    commit: "{NEW}"\n    base: "{BASE}"\nrows:'
    ).replace(
        "    retires_when: never\nretirements:",
        f'    retires_when: never\n    export_point: qwen38\n    commit: "{NEW}"\nretirements:',
    )
    assert out == expected
    data = yaml.safe_load(out)
    assert data["rows"][1]["commit"] == NEW and data["export_points"][0]["base"] == BASE


def test_new_rows_appended_to_a_block_sequence_and_to_an_empty_flow_one() -> None:
    row = {
        "name": "extra",
        "kind": "local",
        "what": "TODO: describe (added by export from Quick: fix)",
        "patch": "patches/extra.patch",
        "cut_against": "0.29.0",
        "retires_when": "TODO",
        "export_point": "qwen38",
        "commit": "0123456789" * 4,
    }
    out = edit_manifest(TEXT.encode(), plan(), [row]).decode()
    assert out.startswith(TEXT.split("retirements:")[0])
    assert out.endswith("retirements: []  # none yet\n")
    data = yaml.safe_load(out)
    assert data["rows"][2] == row  # quoted where YAML would misread it ("0.29.0", digits, colons)
    empty = TEXT.split("rows:")[0] + "rows: []\nretirements: []\n"
    out = edit_manifest(empty.encode(), plan(), [row]).decode()
    assert "rows:\n  - name: extra\n    kind: local\n" in out
    assert yaml.safe_load(out)["rows"] == [row]


def test_insert_after_a_block_scalar_ending_the_row() -> None:
    text = TEXT.replace(
        "    retires_when: never\nretirements:",
        "    retires_when: |\n      when upstream\n      merges it\nretirements:",
    )
    out = edit_manifest(
        text.encode(), plan(commit_updates={"two": NEW}, point_of={"two": "qwen38"}), []
    ).decode()
    assert f'      merges it\n    export_point: qwen38\n    commit: "{NEW}"\nretirements:' in out
    data = yaml.safe_load(out)
    assert data["rows"][1]["retires_when"] == "when upstream\nmerges it\n"
    assert data["rows"][1]["commit"] == NEW

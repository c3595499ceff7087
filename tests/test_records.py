"""``records`` against its oracle, the standard library's ``dataclasses``: the same class body built
both ways behaves the same in everything the package uses."""

from __future__ import annotations

import dataclasses

import pytest

from hyperqwen_patches import records


def _both(body: str, **options: bool) -> tuple[type, type]:
    """Build the class ``C`` from ``body`` with dataclasses and with records."""
    out = []
    for deco, fld in ((dataclasses.dataclass, dataclasses.field), (records.record, records.field)):
        ns: dict = {"field": fld}
        exec(f"from __future__ import annotations\nclass C:\n{body}", ns)
        out.append(deco(**options)(ns["C"]))
    return out[0], out[1]


BODIES = {
    "plain": "    a: int\n    b: str = 'x'\n",
    "factory": "    a: int\n    items: list = field(default_factory=list)\n",
    "derived": (
        "    a: int\n    twice: int = field(init=False, repr=False, compare=False)\n"
        "    def __post_init__(self):\n        object.__setattr__(self, 'twice', 2 * self.a)\n"
    ),
    "hidden": "    a: int\n    note: str = field(default='n', repr=False, compare=False)\n",
    "empty": "    pass\n",
    "own_repr": "    a: int\n    def __repr__(self):\n        return 'mine'\n",
}
OPTIONS = [{}, {"frozen": True}, {"slots": True}, {"frozen": True, "slots": True}]


CASES = [(name, options) for name in sorted(BODIES) for options in OPTIONS]


@pytest.mark.parametrize(
    ("name", "options"), CASES, ids=[f"{n}-{'-'.join(o) or 'default'}" for n, o in CASES]
)
def test_behaves_as_dataclasses(name: str, options: dict[str, bool]) -> None:
    dc, rc = _both(BODIES[name], **options)
    args = [] if name == "empty" else [3]
    d1, d2, r1, r2 = dc(*args), dc(*args), rc(*args), rc(*args)
    assert repr(r1) == repr(d1)
    assert (r1 == r2) == (d1 == d2) and (r1 != r2) == (d1 != d2)
    assert r1.__eq__(object()) is NotImplemented and d1.__eq__(object()) is NotImplemented
    hashable = dc.__hash__ is not None
    assert (rc.__hash__ is not None) == hashable
    if hashable and name != "factory":
        assert (hash(r1) == hash(r2)) == (hash(d1) == hash(d2))
    assert hasattr(r1, "__dict__") == hasattr(d1, "__dict__")
    if args:
        if options.get("frozen"):
            with pytest.raises(dataclasses.FrozenInstanceError):
                d1.a = 4
            with pytest.raises(AttributeError):
                r1.a = 4
        else:
            d1.a = r1.a = 4
            assert repr(r1) == repr(d1)
        d3, r3 = dataclasses.replace(d2, a=9), records.replace(r2, a=9)
        assert repr(r3) == repr(d3) and r3 != r2
        assert records.fields(rc) == tuple(f.name for f in dataclasses.fields(dc))


def test_a_factory_gives_each_instance_its_own_value() -> None:
    _, rc = _both(BODIES["factory"])
    a, b = rc(1), rc(2)
    a.items.append(1)
    assert b.items == [] and rc(3, [7]).items == [7]


def test_defaults_stay_readable_on_the_class_unless_slotted() -> None:
    dc, rc = _both(BODIES["plain"])
    assert rc.b == dc.b == "x"
    _, rs = _both(BODIES["plain"], slots=True)
    assert rs.__slots__ == ("a", "b") and rs(1).b == "x"


def test_replace_refuses_a_field_not_in_init() -> None:
    _, rc = _both(BODIES["derived"], frozen=True)
    with pytest.raises(ValueError, match="twice"):
        records.replace(rc(1), twice=5)
    assert records.replace(rc(1), a=4).twice == 8


def test_importing_it_imports_neither_dataclasses_nor_typing() -> None:
    import subprocess
    import sys

    code = "import sys, hyperqwen_patches.records; print('dataclasses' in sys.modules, 'typing' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]

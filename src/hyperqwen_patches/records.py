"""``record``: the part of ``dataclasses`` this package uses, at a fraction of its import cost.

Every result object here is a plain record: fields, ``__init__``, ``__repr__``, ``__eq__``, a hash
when frozen. ``dataclasses`` builds each class with five or six ``exec`` calls and imports
``inspect`` (and through it ``ast``, ``dis``, ``tokenize``): 17 ms of the 32 ms that ``apply`` spent
importing its modules, more than the work on a 50-row series (docs/performance.md, "Start-up").
``record`` compiles only ``__init__`` per class (a record per hunk is made on the hot path) and
shares one ``__repr__``, ``__eq__`` and ``__hash__`` that read the class's field names.

The same spelling and meaning as ``dataclasses`` for what is supported: ``@record``,
``@record(frozen=True, slots=True)``, ``field(default=..., default_factory=..., init=False,
repr=False, compare=False)``, ``__post_init__``, ``replace``; a method the class body defines is kept.
Not supported (and not used): inheritance between records, ``order``, ``kw_only``, ``ClassVar``
fields, ``InitVar``.
"""

from __future__ import annotations

from operator import attrgetter

TYPE_CHECKING = False  # not typing's: importing typing costs more than this module
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    T = TypeVar("T")

_MISSING: Any = object()


class FrozenInstanceError(AttributeError):
    """Assigning to a field of a frozen record."""


class Field:
    __slots__ = ("compare", "default", "factory", "init", "name", "repr")

    def __init__(self, default: Any, factory: Any, init: bool, repr: bool, compare: bool) -> None:
        self.name = ""
        self.default = default
        self.factory = factory
        self.init = init
        self.repr = repr
        self.compare = compare


def field(
    *,
    default: Any = _MISSING,
    default_factory: Callable[[], Any] | Any = _MISSING,
    init: bool = True,
    repr: bool = True,
    compare: bool = True,
) -> Any:
    return Field(default, default_factory, init, repr, compare)


def fields(obj: Any) -> tuple[str, ...]:
    """The field names of a record class or instance, in order."""
    return tuple(f.name for f in obj.__record_fields__)


def replace(obj: T, **changes: Any) -> T:
    """A copy of ``obj`` with ``changes`` (init fields only), built through ``__init__``."""
    for f in obj.__record_fields__:  # type: ignore[attr-defined]
        if f.init and f.name not in changes:
            changes[f.name] = getattr(obj, f.name)
        elif not f.init and f.name in changes:
            raise ValueError(f"field {f.name} is not an __init__ field of {type(obj).__name__}")
    return type(obj)(**changes)


def _key(names: tuple[str, ...]) -> Callable[[Any], tuple]:
    """The compared fields of a record as a tuple (attrgetter gives a bare value for one name)."""
    if len(names) > 1:
        return attrgetter(*names)
    get = attrgetter(*names) if names else None
    return (lambda self: (get(self),)) if get else (lambda self: ())


def _repr(self: Any) -> str:
    shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__record_shown__)
    return f"{type(self).__qualname__}({shown})"


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    key = self.__class__.__record_key__
    return key(self) == key(other)


def _hash(self: Any) -> int:
    return hash(self.__class__.__record_key__(self))


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


if TYPE_CHECKING:
    # What a type checker sees: a dataclass-like decorator (PEP 681), so every record's constructor
    # is checked against its fields.
    from typing import dataclass_transform, overload

    @overload
    def record(cls: type[T], /) -> type[T]: ...
    @overload
    def record(*, frozen: bool = False, slots: bool = False) -> Callable[[type[T]], type[T]]: ...
    @dataclass_transform(field_specifiers=(field,))
    def record(
        cls: type[T] | None = None, /, *, frozen: bool = False, slots: bool = False
    ) -> Any: ...


def record(cls: type[T] | None = None, /, *, frozen: bool = False, slots: bool = False) -> Any:  # type: ignore[no-redef]
    def wrap(c: type[T]) -> type[T]:
        return _build(c, frozen, slots)

    return wrap if cls is None else wrap(cls)


def _build(cls: type, frozen: bool, slots: bool) -> type:
    body = cls.__dict__
    flds: list[Field] = []
    for name in body.get("__annotations__", {}):
        value = body.get(name, _MISSING)
        f = value if isinstance(value, Field) else Field(value, _MISSING, True, True, True)
        f.name = name
        flds.append(f)

    # Defaults and factories reach the generated code as globals, never as source text.
    env: dict[str, Any] = {"_MISSING": _MISSING}
    params, lines = [], []
    set_ = "_setattr(self, {0!r}, {1})" if frozen else "self.{0} = {1}"
    if frozen:
        env["_setattr"] = object.__setattr__
    for f in flds:
        if f.init:
            if f.factory is not _MISSING:
                env[f"_factory_{f.name}"] = f.factory
                params.append(f"{f.name}=_MISSING")
                value = f"_factory_{f.name}() if {f.name} is _MISSING else {f.name}"
            elif f.default is not _MISSING:
                env[f"_default_{f.name}"] = f.default
                params.append(f"{f.name}=_default_{f.name}")
                value = f.name
            else:
                params.append(f.name)
                value = f.name
        elif f.factory is not _MISSING:
            env[f"_factory_{f.name}"] = f.factory
            value = f"_factory_{f.name}()"
        elif f.default is not _MISSING:
            env[f"_default_{f.name}"] = f.default
            value = f"_default_{f.name}"
        else:
            continue  # set by __post_init__
        lines.append(set_.format(f.name, value))
    if "__post_init__" in body:
        lines.append("self.__post_init__()")
    src = [
        f"def __init__(self, {', '.join(params)}):",
        *(f"    {line}" for line in lines or ["pass"]),
    ]
    # Only __init__ is compiled per class (it is on the hot path: a record per hunk); the other
    # methods are shared and read the class's field names. It is compiled when the class is first
    # instantiated: a command imports many record classes and builds few (~0.1 ms each spared).
    owner: list[type] = []
    new_attrs: dict[str, Any] = {
        "__init__": _lazy_init("\n".join(src), env, cls.__qualname__, owner)
    }
    new_attrs.update({m: f for m, f in (("__repr__", _repr), ("__eq__", _eq)) if m not in body})
    if frozen:
        new_attrs.update(__setattr__=_frozen_setattr, __delattr__=_frozen_delattr)
    if "__hash__" not in body or (body["__hash__"] is None and "__eq__" in body):
        # as dataclasses: frozen and compared by value hashes by value; mutable is unhashable
        new_attrs["__hash__"] = _hash if frozen else None
    new_attrs["__record_fields__"] = tuple(flds)
    new_attrs["__record_shown__"] = tuple(f.name for f in flds if f.repr)
    new_attrs["__record_key__"] = _key(tuple(f.name for f in flds if f.compare))
    if not slots:
        for f in flds:
            if isinstance(body.get(f.name), Field):
                delattr(cls, f.name)
        for name, value in new_attrs.items():
            setattr(cls, name, value)
        owner.append(cls)
        return cls
    ns = {k: v for k, v in body.items() if k not in ("__dict__", "__weakref__")}
    for f in flds:  # class attributes would shadow the slots
        ns.pop(f.name, None)
    ns.update(new_attrs)
    ns["__slots__"] = tuple(f.name for f in flds)
    new = type(cls)(cls.__name__, cls.__bases__, ns)
    new.__qualname__ = cls.__qualname__
    owner.append(new)
    return new


def _lazy_init(src: str, env: dict[str, Any], qualname: str, owner: list[type]) -> Any:
    """A stand-in ``__init__`` that compiles the real one, puts it on the class, and runs it."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        exec(compile(src, f"<record {qualname}>", "exec"), env)
        init = env["__init__"]
        init.__qualname__ = f"{qualname}.__init__"
        type.__setattr__(owner[0], "__init__", init)
        init(self, *args, **kwargs)

    __init__.__qualname__ = f"{qualname}.__init__"
    return __init__

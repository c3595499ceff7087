"""Symbol tables of a tree, built with ``ast`` on demand: modules, their names, classes and functions.

The name and signature checks ask one question of a tree: what does ``module.attr.attr...`` name
there? :class:`Symbols` answers it lazily (a module is read and parsed the first time a lookup
reaches it), following imports (``from x import y as z`` binds ``z`` to ``x.y``), star imports,
submodules, class bodies, instance attributes (``self.x = ...`` in any method) and base classes, as
far as static analysis can. Every answer is one of:

- :class:`Found`: a definition, with the file and line that bind it (so a caller can tell a
  pristine definition from one a row added);
- :class:`Missing`: the tree has the container and the container has no such name;
- :class:`Unknown`: static analysis cannot tell (a module or class ``__getattr__``, an attribute of a
  value, a base class or module outside the package, a star import it cannot read).

Only ``Missing`` is ever reported; ``Unknown`` is counted, so silence is never read as safety.
"""

from __future__ import annotations

import ast
import enum
from collections import deque
from collections.abc import Callable, Iterator
from typing import Literal

from hyperqwen_patches.records import field, record
from hyperqwen_patches.statics.analysis import no_gc

Reader = Callable[[bytes], bytes | None]
Kind = Literal["module", "class", "function", "value"]
# Bases that add no attributes a vLLM class could rely on by name (anything else outside the
# package may: an unresolved attribute on a class with such a base is Unknown, not Missing).
PLAIN_BASES = frozenset({"object", "ABC", "Generic", "Protocol", "NamedTuple", "TypedDict"})
# Enum bases add only what an enum has (name, value, ...): any other missing member is Missing.
ENUM_BASES = frozenset({"Enum", "IntEnum", "StrEnum", "Flag", "IntFlag"})
ENUM_ATTRS = frozenset(dir(enum.IntFlag)) | frozenset(dir(enum.StrEnum)) | {"name", "value"}


@record
class ClassInfo:
    module: ModuleInfo
    node: ast.ClassDef
    members: dict[str, tuple[Kind, ast.AST, int]] = field(default_factory=dict)
    instance: dict[str, int] = field(default_factory=dict)  # self.X = ... -> line
    # The declared or constructed class of an attribute: ``self.x: T = ...``, class-level ``x: T``,
    # or every ``self.x = C(...)`` calling the same dotted name (a disagreement records nothing).
    types: dict[str, ast.expr] = field(default_factory=dict)
    declared: set[str] = field(default_factory=set)  # attributes whose class is annotated
    dynamic: bool = False  # defines __getattr__ / __getattribute__


@record
class ModuleInfo:
    name: str
    path: bytes
    names: dict[str, tuple[str, object, int]] = field(default_factory=dict)  # see _bind
    stars: list[str] = field(default_factory=list)
    dynamic: bool = False  # a module-level __getattr__
    classes: dict[int, ClassInfo] = field(
        default_factory=dict
    )  # id(ClassDef) -> its table, built once


@record(frozen=True)
class Found:
    kind: Kind
    obj: object  # ModuleInfo | ClassInfo | ast.FunctionDef | None
    path: bytes
    line: int
    via_instance: bool = False  # reached as an attribute of an instance (self.x, obj.method)
    owner: ClassInfo | None = None  # the class a method was found in
    type_expr: ast.expr | None = None  # a value's declared or constructed class (in owner's module)


@record(frozen=True)
class Missing:
    container: str  # what lacks the name (module or class, dotted)
    name: str


@record(frozen=True)
class Unknown:
    reason: str


Result = Found | Missing | Unknown


class Symbols:
    """A tree's symbols; ``read`` gives a file's bytes (``b"vllm/x.py"``) or None."""

    def __init__(self, read: Reader, package: str = "vllm") -> None:
        self.read = read
        self.package = package
        self._modules: dict[str, ModuleInfo | None] = {}
        self.parsed = 0  # files parsed (the cost of resolution)

    # -- modules

    def module(self, name: str) -> ModuleInfo | None:
        if name in self._modules:
            return self._modules[name]
        info: ModuleInfo | None = None
        if name == self.package or name.startswith(self.package + "."):
            base = name.replace(".", "/").encode()
            for path in (base + b".py", base + b"/__init__.py"):
                data = self.read(path)
                if data is None:
                    continue
                try:
                    with no_gc():
                        tree = ast.parse(data)
                except (SyntaxError, ValueError):
                    break
                self.parsed += 1
                info = _module_info(name, path, tree, is_package=path.endswith(b"__init__.py"))
                break
        self._modules[name] = info
        return info

    def in_package(self, dotted: str) -> bool:
        return dotted == self.package or dotted.startswith(self.package + ".")

    # -- lookups

    def lookup_dotted(self, parts: list[str]) -> Result:
        """What ``a.b.c.d`` names: the longest prefix that is a module, then attributes."""
        for i in range(len(parts), 0, -1):
            if self.module(".".join(parts[:i])) is not None:
                return self.lookup(".".join(parts[:i]), parts[i:])
        return self.lookup(".".join(parts), [])

    def lookup(self, module: str, attrs: list[str]) -> Result:
        """What ``module.attrs[0].attrs[1]...`` names in this tree."""
        if not self.in_package(module):
            return Unknown(f"{module} is outside {self.package}")
        info = self.module(module)
        if info is None:
            # ``a.b`` may be an attribute of module ``a`` rather than a module.
            parent, _, last = module.rpartition(".")
            if parent and self.in_package(parent) and self.module(parent) is not None:
                return self.lookup(parent, [last, *attrs])
            return Missing(module.rpartition(".")[0] or module, module.rpartition(".")[2])
        cur: Result = Found("module", info, info.path, 0)
        for attr in attrs:
            assert isinstance(cur, Found)
            cur = self._attr(cur, attr, depth=0)
            if not isinstance(cur, Found):
                return cur
        return cur

    def _attr(self, cur: Found, attr: str, depth: int) -> Result:
        if depth > 30:
            return Unknown("import cycle")
        if cur.kind == "module":
            assert isinstance(cur.obj, ModuleInfo)
            return self._module_attr(cur.obj, attr, depth)
        if cur.kind == "class":
            assert isinstance(cur.obj, ClassInfo)
            return self.class_attr(cur.obj, attr, via_instance=cur.via_instance)
        if cur.kind == "value" and cur.type_expr is not None and cur.owner is not None:
            typed = self.expr(cur.owner.module, cur.type_expr)
            if isinstance(typed, Found) and typed.kind == "class":
                assert isinstance(typed.obj, ClassInfo)
                return self.class_attr(typed.obj, attr, via_instance=True)
            return Unknown(f"attribute {attr} of a value typed {ast.unparse(cur.type_expr)}")
        return Unknown(f"attribute {attr} of a {cur.kind}")

    def _module_attr(self, info: ModuleInfo, attr: str, depth: int) -> Result:
        bound = info.names.get(attr)
        if bound is not None:
            how, obj, line = bound
            if how == "import":
                target = str(obj)
                if not self.in_package(target):
                    return Unknown(f"{target} is outside {self.package}")
                sub = self.module(target)
                if sub is not None:
                    return Found("module", sub, sub.path, 0)
                parent, _, last = target.rpartition(".")
                parent_info = self.module(parent) if parent else None
                if parent_info is None:
                    return Missing(parent, last)
                return self._module_attr(parent_info, last, depth + 1)
            if how == "class":
                assert isinstance(obj, ast.ClassDef)
                return Found("class", self.class_info(info, obj), info.path, line)
            if how == "function":
                return Found("function", obj, info.path, line)
            return Found("value", None, info.path, line)
        sub = self.module(f"{info.name}.{attr}")
        if sub is not None:
            return Found("module", sub, sub.path, 0)
        for star in info.stars:
            if not self.in_package(star):
                return Unknown(f"star import from {star}")
            star_info = self.module(star)
            if star_info is None:
                return Unknown(f"star import from {star}")
            got = self._module_attr(star_info, attr, depth + 1)
            if not isinstance(got, Missing):
                return got
        if info.dynamic:
            return Unknown(f"{info.name} defines __getattr__")
        return Missing(info.name, attr)

    def class_info(self, module: ModuleInfo, node: ast.ClassDef) -> ClassInfo:
        info = module.classes.get(id(node))
        if info is None:
            info = module.classes[id(node)] = _class_info(module, node)
        return info

    def class_attr(self, cls: ClassInfo, attr: str, *, via_instance: bool, seen: int = 0) -> Result:
        member = cls.members.get(attr)
        if member is not None:
            kind, node, line = member
            if kind == "class":
                assert isinstance(node, ast.ClassDef)
                return Found("class", self.class_info(cls.module, node), cls.module.path, line)
            return Found(kind, node, cls.module.path, line, via_instance, cls, cls.types.get(attr))
        if attr in cls.instance:
            return Found(
                "value", None, cls.module.path, cls.instance[attr], True, cls, cls.types.get(attr)
            )
        if cls.dynamic:
            return Unknown(f"{cls.node.name} defines __getattr__")
        return self.bases_attr(cls, attr, via_instance=via_instance, seen=seen)

    def bases_attr(self, cls: ClassInfo, attr: str, *, via_instance: bool, seen: int = 0) -> Result:
        """``attr`` looked up in the bases of ``cls`` only (what ``super().attr`` reaches)."""
        if seen > 20:
            return Unknown("deep class hierarchy")
        unknown: Unknown | None = None
        for base in cls.node.bases:
            if isinstance(base, ast.Subscript):  # Generic[T], Builder[Meta]: the class itself
                base = base.value
            resolved = self.expr(cls.module, base)
            if isinstance(resolved, Found) and resolved.kind == "class":
                assert isinstance(resolved.obj, ClassInfo)
                got = self.class_attr(resolved.obj, attr, via_instance=via_instance, seen=seen + 1)
                if isinstance(got, Found):
                    return got
                if isinstance(got, Unknown):
                    unknown = got
            elif _base_name(base) in ENUM_BASES:
                if attr in ENUM_ATTRS:
                    unknown = Unknown(f"{attr} may come from {_base_name(base)}")
            elif _base_name(base) not in PLAIN_BASES:
                unknown = Unknown(f"base {ast.unparse(base)} of {cls.node.name} is not resolved")
        return unknown or Missing(f"{cls.module.name}.{cls.node.name}", attr)

    def expr(self, module: ModuleInfo, node: ast.expr) -> Result:
        """Resolve a module-scope expression (a base class, a decorator) to a symbol."""
        chain = dotted_chain(node)
        if chain is None:
            return Unknown(f"{ast.unparse(node)} is not a dotted name")
        return self.lookup(module.name, chain)


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Subscript):
        node = node.value
    chain = dotted_chain(node)
    return chain[-1] if chain else ""


def dotted_chain(node: ast.expr) -> list[str] | None:
    """``a.b.c`` -> ["a", "b", "c"]; None for anything but names and attributes."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def resolve_relative(module: str, level: int, target: str | None, *, is_package: bool) -> str:
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    base = ".".join(parts)
    return f"{base}.{target}" if target else base


def _module_info(name: str, path: bytes, tree: ast.Module, *, is_package: bool) -> ModuleInfo:
    info = ModuleInfo(name, path)
    _bind_block(info, tree.body, is_package)
    return info


def _bind_block(info: ModuleInfo, body: list[ast.stmt], is_package: bool) -> None:
    """Module-level bindings, looking into if/try/with blocks (TYPE_CHECKING imports included)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            info.names[node.name] = ("function", node, node.lineno)
            if node.name == "__getattr__":
                info.dynamic = True
        elif isinstance(node, ast.ClassDef):
            info.names[node.name] = ("class", node, node.lineno)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    info.names[alias.asname] = ("import", alias.name, node.lineno)
                else:
                    top = alias.name.split(".")[0]
                    info.names[top] = ("import", top, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            source = (
                resolve_relative(info.name, node.level, node.module, is_package=is_package)
                if node.level
                else (node.module or "")
            )
            for alias in node.names:
                if alias.name == "*":
                    info.stars.append(source)
                else:
                    info.names[alias.asname or alias.name] = (
                        "import",
                        f"{source}.{alias.name}",
                        node.lineno,
                    )
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        info.names.setdefault(n.id, ("value", None, node.lineno))
                        if info.names[n.id][0] != "value":
                            info.names[n.id] = ("value", None, node.lineno)
        elif isinstance(node, ast.If | ast.With | ast.For | ast.While):
            _bind_block(info, node.body, is_package)
            _bind_block(info, node.orelse if not isinstance(node, ast.With) else [], is_package)
        elif isinstance(node, ast.Try):
            _bind_block(info, node.body, is_package)
            for handler in node.handlers:
                _bind_block(info, handler.body, is_package)
            _bind_block(info, node.orelse, is_package)
            _bind_block(info, node.finalbody, is_package)


def _decorators(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    out = set()
    for d in node.decorator_list:
        chain = dotted_chain(d.func if isinstance(d, ast.Call) else d)
        if chain:
            out.add(chain[-1])
    return out


def _class_info(module: ModuleInfo, node: ast.ClassDef) -> ClassInfo:
    info = ClassInfo(module, node)
    for stmt in _flatten(node.body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            decorators = _decorators(stmt)
            kind: Kind = "value" if decorators & {"property", "cached_property"} else "function"
            if stmt.name in info.members and "setter" in str(decorators):
                continue
            info.members[stmt.name] = (kind, stmt, stmt.lineno)
            if stmt.name in ("__getattr__", "__getattribute__"):
                info.dynamic = True
            # Instance attributes: self.X = ... (first parameter) anywhere in a method.
            if stmt.args.args:
                me = stmt.args.args[0].arg
                for sub in _statements(stmt):
                    targets: list[ast.expr] = []
                    if isinstance(sub, ast.Assign):
                        targets = sub.targets
                    elif isinstance(sub, (ast.AnnAssign, ast.AugAssign)):
                        targets = [sub.target]
                    for t in targets:
                        for n in ast.walk(t):
                            if (
                                isinstance(n, ast.Attribute)
                                and isinstance(n.value, ast.Name)
                                and n.value.id == me
                            ):
                                info.instance.setdefault(n.attr, n.lineno)
                                _note_type(info, n.attr, sub, t is n)
        elif isinstance(stmt, ast.ClassDef):
            info.members[stmt.name] = ("class", stmt, stmt.lineno)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        info.members[n.id] = ("value", stmt, stmt.lineno)
                        _note_type(info, n.id, stmt, t is n)
    for name in [k for k, v in info.types.items() if v is _CONFLICT]:
        del info.types[name]
    return info


_CONFLICT = ast.Constant(value=None)  # two different classes seen for one attribute


def _class_of(annotation: ast.expr) -> ast.expr | None:
    """``T``, ``T | None``, ``Optional[T]``, ``"T"`` -> the dotted name T; anything else -> None."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        sides = [annotation.left, annotation.right]
        real = [x for x in sides if not (isinstance(x, ast.Constant) and x.value is None)]
        return _class_of(real[0]) if len(real) == 1 else None
    if isinstance(annotation, ast.Subscript) and dotted_chain(annotation.value) in (
        ["Optional"],
        ["typing", "Optional"],
    ):
        return _class_of(annotation.slice)
    return annotation if dotted_chain(annotation) is not None else None


def _note_type(info: ClassInfo, name: str, stmt: ast.AST, whole_target: bool) -> None:
    """Record what class ``name`` holds, from an annotation (wins) or a constructor call."""
    if not whole_target:
        return  # a, self.x = ...: unpacking says nothing about the class
    if isinstance(stmt, ast.AnnAssign):
        declared = _class_of(stmt.annotation)
        if declared is not None:
            info.types[name] = declared
            info.declared.add(name)
        return
    value = getattr(stmt, "value", None)
    if not isinstance(stmt, ast.Assign) or not isinstance(value, ast.Call) or name in info.declared:
        return
    made = value.func if dotted_chain(value.func) is not None else None
    if made is None:
        return
    known = info.types.get(name)
    if known is None:
        info.types[name] = made
    elif (
        known is not _CONFLICT
        and ast.dump(known) != ast.dump(made)
        and name not in _annotated(info)
    ):
        info.types[name] = _CONFLICT


def _annotated(info: ClassInfo) -> set[str]:
    return set()


_BLOCK = (ast.stmt, ast.ExceptHandler, ast.match_case)


def _statements(node: ast.AST) -> Iterator[ast.AST]:
    """``ast.walk(node)`` without the expressions: the same nodes that hold statements, in the same
    breadth-first order (so the first ``self.x = ...`` found is the one ``ast.walk`` finds first).
    No expression holds a statement, and skipping them makes a large class's table ~5x cheaper to
    build (issue #37: it is built for every version of a file a rebase writes)."""
    todo = deque([node])
    while todo:
        node = todo.popleft()
        yield node
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, list):
                todo.extend(x for x in value if isinstance(x, _BLOCK))


def _flatten(body: list[ast.stmt]) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, ast.If | ast.Try):
            out += _flatten(stmt.body)
            out += _flatten(getattr(stmt, "orelse", []))
            for handler in getattr(stmt, "handlers", []):
                out += _flatten(handler.body)
        else:
            out.append(stmt)
    return out

"""What the added lines refer to: names, attribute chains, imports and calls, as symbol references.

A reference is ``(module, attrs)``: ``from vllm.x import y`` on an added line is ``vllm.x`` + ``[y]``;
a module-level name ``n`` used in ``vllm/a.py`` is ``vllm.a`` + ``[n, ...]`` unless ``n`` is bound
by an import there, in which case the reference starts at the import's target (so a name a row
imports is looked up where it comes from, on every tree); ``self.x`` in a method of class ``C`` is
``vllm.a`` + ``[C, x]`` reached through an instance. Local variables and parameters are not
followed (their types are not known statically); they are counted as skipped.
"""

from __future__ import annotations

import ast
import bisect

from hyperqwen_patches.records import record
from hyperqwen_patches.statics.provenance import Provenance
from hyperqwen_patches.statics.symbols import dotted_chain, resolve_relative


@record(frozen=True)
class Ref:
    row: str
    path: bytes
    line: int
    module: str
    attrs: tuple[str, ...]
    text: str  # the source expression, for messages
    via_instance: bool = False  # attrs[-2] is a class reached as ``self`` (bound methods)
    self_depth: int = 0  # how many leading attrs name the enclosing class (self.x: the class path)
    # True: ``module`` + ``attrs`` is one dotted path whose module part is the longest prefix that is
    # a module of the tree (an import target); False: ``attrs`` start in ``module``'s own scope.
    dotted_path: bool = False
    # A parameter's annotation (``def f(cfg: ModelConfig)``: ``cfg.x`` is ``ModelConfig`` + ``[x]``),
    # resolved in the file's scope on the old side and rewritten as a class path (names.Views).
    annotation: ast.expr | None = None
    from_bases: bool = False  # super().attr: looked up in the enclosing class's bases

    @property
    def dotted(self) -> str:
        return ".".join((self.module, *self.attrs))


@record(frozen=True)
class CallRef:
    ref: Ref | None  # None: the callee is not a name chain (a call result, a subscript, a local)
    row: str
    path: bytes
    line: int
    positional: int
    keywords: tuple[str, ...]
    starred: bool  # *args or **kwargs in the call: it cannot be bound statically
    text: str
    skip_reason: str = ""


def module_name(path: bytes) -> str:
    name = path.decode("utf-8", "replace").removesuffix(".py").replace("/", ".")
    return name.removesuffix(".__init__")


class _Scope(set[str]):
    """A function's local names; ``typed`` holds its parameters annotated with a class."""

    typed: dict[str, ast.expr]


def _locals(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> _Scope:
    from hyperqwen_patches.statics.symbols import _class_of

    a = fn.args
    names = _Scope(p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs))
    names.typed = {}
    for p in (*a.posonlyargs, *a.args, *a.kwonlyargs):
        declared = _class_of(p.annotation) if p.annotation is not None else None
        if declared is not None:
            names.typed[p.arg] = declared
    names |= {p.arg for p in (a.vararg, a.kwarg) if p is not None}
    body = fn.body if isinstance(fn.body, list) else [fn.body]
    for stmt in body:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                names.add(n.id)
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(n.name)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                names |= {(x.asname or x.name).split(".")[0] for x in n.names}
            elif isinstance(n, ast.arg):
                names.add(n.arg)
            elif isinstance(n, ast.ExceptHandler) and n.name:
                names.add(n.name)
    return names


def _decorated(fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> bool:
    return any(isinstance(d, ast.Name) and d.id == name for d in fn.decorator_list)


class _Collector:
    def __init__(self, tree: ast.Module, path: bytes, prov: Provenance) -> None:
        self.path = path
        self.prov = prov
        self.module = module_name(path)
        self.is_package = path.endswith(b"__init__.py")
        self.refs: list[Ref] = []
        self.calls: list[CallRef] = []
        self.imports: dict[str, tuple[str, int]] = {}  # module-level name -> (target, line)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    local = a.asname or a.name.split(".")[0]
                    self.imports[local] = (a.name if a.asname else local, node.lineno)
            elif isinstance(node, ast.ImportFrom):
                src = self._source(node)
                for a in node.names:
                    if a.name != "*":
                        self.imports[a.asname or a.name] = (f"{src}.{a.name}", node.lineno)
        self.tree = tree
        # Lines rows added, sorted: a statement that spans none of them holds no reference to
        # record (every node recorded starts or ends on an added line), so it is not walked.
        self.added = [line for line, _ in prov.added_lines(path)]

    def _spans_added(self, stmt: ast.stmt) -> bool:
        first = min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", ()))])
        last = stmt.end_lineno or stmt.lineno
        i = bisect.bisect_left(self.added, first)
        return i < len(self.added) and self.added[i] <= last

    def _source(self, node: ast.ImportFrom) -> str:
        if node.level:
            return resolve_relative(
                self.module, node.level, node.module, is_package=self.is_package
            )
        return node.module or ""

    def row(self, node: ast.AST) -> str | None:
        end = getattr(node, "end_lineno", None) or node.lineno  # type: ignore[attr-defined]
        return self.prov.owner(self.path, end) or self.prov.owner(self.path, node.lineno)  # type: ignore[attr-defined]

    def run(self) -> None:
        self.visit_body(self.tree.body, [], [], None, None)

    def visit_body(
        self,
        body: list[ast.stmt],
        scopes: list[set[str]],
        cls: list[str],
        me: str | None,
        cls_param: str | None,
    ) -> None:
        for stmt in body:
            if self._spans_added(stmt):
                self.visit(stmt, scopes, cls, me, cls_param)

    def visit(
        self,
        node: ast.AST,
        scopes: list[set[str]],
        cls: list[str],
        me: str | None,
        cls_param: str | None,
    ) -> None:
        if isinstance(node, ast.ClassDef):
            for d in (*node.bases, *node.decorator_list, *(k.value for k in node.keywords)):
                self.visit(d, scopes, cls, me, cls_param)
            self.visit_body(node.body, scopes, [*cls, node.name], None, None)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                self.visit(d, scopes, cls, me, cls_param)
            for default in (*node.args.defaults, *(d for d in node.args.kw_defaults if d)):
                self.visit(default, scopes, cls, me, cls_param)
            new_me, new_cls = None, None
            params = [*node.args.posonlyargs, *node.args.args]
            in_class = bool(cls) and (not scopes)
            if in_class and params and not _decorated(node, "staticmethod"):
                if _decorated(node, "classmethod"):
                    new_cls = params[0].arg
                else:
                    new_me = params[0].arg
            inner_me = new_me if in_class else me
            inner_cls = new_cls if in_class else cls_param
            self.visit_body(node.body, [*scopes, _locals(node)], cls, inner_me, inner_cls)
            return
        if isinstance(node, ast.Lambda):
            self.visit(node.body, [*scopes, _locals(node)], cls, me, cls_param)
            return
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            # Comprehension variables are local to it, even at module or class level.
            inner = _Scope(
                n.id
                for gen in node.generators
                for n in ast.walk(gen.target)
                if isinstance(n, ast.Name)
            )
            inner.typed = {}
            for child in ast.iter_child_nodes(node):
                self.visit(child, [*scopes, inner], cls, me, cls_param)
            return
        if isinstance(node, ast.Import):
            if self.row(node) is not None:
                for a in node.names:
                    parts = a.name.split(".")
                    self._add(node, parts[0], tuple(parts[1:]), f"import {a.name}")
            return
        if isinstance(node, ast.ImportFrom):
            if self.row(node) is not None:
                src = self._source(node)
                for a in node.names:
                    if a.name != "*":
                        self._add(node, src, (a.name,), f"from {src} import {a.name}")
            return
        if isinstance(node, ast.Call):
            self._call(node, scopes, cls, me, cls_param)
        if isinstance(node, (ast.Attribute, ast.Name)) and isinstance(node.ctx, ast.Load):
            chain = dotted_chain(node)
            if chain is not None:
                if self.row(node) is not None:
                    ref = self.ref(node, chain, scopes, cls, me, cls_param)
                    if ref is not None:
                        self.refs.append(ref)
                return
        for child in ast.iter_child_nodes(node):
            self.visit(child, scopes, cls, me, cls_param)

    def _add(self, node: ast.AST, module: str, attrs: tuple[str, ...], text: str) -> None:
        row = self.row(node)
        assert row is not None
        self.refs.append(
            Ref(row, self.path, node.lineno, module, attrs, text, dotted_path=True)  # type: ignore[attr-defined]
        )

    def ref(
        self,
        node: ast.AST,
        chain: list[str],
        scopes: list[set[str]],
        cls: list[str],
        me: str | None,
        cls_param: str | None,
    ) -> Ref | None:
        row = self.row(node)
        if row is None:
            return None
        root, rest = chain[0], chain[1:]
        text = ".".join(chain)
        line = node.lineno  # type: ignore[attr-defined]
        if root in (me, cls_param) and root is not None and cls:
            if not rest:
                return None
            return Ref(
                row,
                self.path,
                line,
                self.module,
                (*cls, *rest),
                text,
                via_instance=root == me,
                self_depth=len(cls),
            )
        for scope in reversed(scopes):
            if root in scope:
                typed = getattr(scope, "typed", {}).get(root)
                if typed is None or not rest:
                    return None  # a local or a parameter: its type is not known statically
                # A parameter annotated with a class: names.Views resolves the class, then attrs.
                return Ref(row, self.path, line, self.module, tuple(rest), text, annotation=typed)
        if root in self.imports:
            target, _ = self.imports[root]
            parts = target.split(".")
            return Ref(row, self.path, line, parts[0], (*parts[1:], *rest), text, dotted_path=True)
        return Ref(row, self.path, line, self.module, tuple(chain), text)

    def _call(
        self,
        node: ast.Call,
        scopes: list[set[str]],
        cls: list[str],
        me: str | None,
        cls_param: str | None,
    ) -> None:
        row = self.row(node.func) if node.func else None
        if row is None:
            return
        starred = any(isinstance(a, ast.Starred) for a in node.args) or any(
            k.arg is None for k in node.keywords
        )
        chain = dotted_chain(node.func)
        ref = self.ref(node.func, chain, scopes, cls, me, cls_param) if chain else None
        if chain is None and cls and (me or cls_param) and _is_super(node.func):
            assert isinstance(node.func, ast.Attribute)
            ref = Ref(
                row,
                self.path,
                node.lineno,
                self.module,
                (*cls, node.func.attr),
                ast.unparse(node.func),
                via_instance=True,
                self_depth=len(cls),
                from_bases=True,
            )
        reason = ""
        if chain is None:
            reason = "callee is not a name"
        elif ref is None:
            reason = "callee is a local or a parameter"
        self.calls.append(
            CallRef(
                ref,
                row,
                self.path,
                node.lineno,
                sum(1 for a in node.args if not isinstance(a, ast.Starred)),
                tuple(k.arg for k in node.keywords if k.arg is not None),
                starred,
                ast.unparse(node.func),
                reason,
            )
        )


def _is_super(func: ast.expr) -> bool:
    """``super().attr`` (or ``super(C, self).attr``)."""
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Call)
        and isinstance(func.value.func, ast.Name)
        and func.value.func.id == "super"
    )


def collect(tree: ast.Module, path: bytes, prov: Provenance) -> tuple[list[Ref], list[CallRef]]:
    """The references and calls on the lines rows added to ``path`` (parsed as ``tree``)."""
    c = _Collector(tree, path, prov)
    c.run()
    return c.refs, c.calls

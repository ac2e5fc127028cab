"""A mypy plugin that checks effax effect rows.

Enable it in the mypy configuration of a project that uses effax:

```toml
[tool.mypy]
plugins = ["effax_stubs.mypy_plugin"]
```

Types already check *values* (``Ask[float].provide("x")`` is an error without any
plugin). The plugin checks what types cannot say, with its own error codes:

- ``effax-undeclared``: inside a function decorated with ``@effax.uses(...)``, an
  effect operation (``ask``, ``get``, ``set``, ``modify``, ``next_key``, ``emit``, the
  ``effax.random`` samplers), a call to another ``@effax.uses`` function, a call to a
  function made by ``effax.handle(f, *handlers)`` / ``effax.jit(f)`` (whose row is
  ``f``'s row minus what the handlers discharge), a call to the function returned by
  ``effax.grad`` / ``value_and_grad`` / ``vmap`` / ``checkpoint`` / ``shard_map``, or an
  ``effax.scan`` / ``fori_loop`` / ``while_loop`` / ``cond`` / ``switch`` / ``map`` (which
  perform their bodies' rows) that needs an effect neither in the function's row nor
  handled by an enclosing ``with`` in the same function.
- ``effax-unhandled``: the same at module level (scripts, ``if __name__ == "__main__":``
  blocks), where no caller can install a handler.
- ``effax-handler-type``: a handler given a value that its effect cannot carry
  although the types agree: an unhashable value for a ``static=True`` ``Ask``; a
  ``str`` or ``bytes`` for a traced ``Ask`` or a ``State`` (traced values cross
  ``jax.jit`` as arrays); an ``int`` for a ``State[float]`` (or a ``bool`` for a
  ``State[int]``), whose dtype would then change on the first update.

What the plugin understands, and where it stays silent rather than guess:

- Effects are module-level declarations (``temperature = effax.Ask[float]("t")``),
  reached by any name: ``from mylib import temperature as t``, ``mylib.temperature``,
  a module-level alias ``t = temperature``. Effects held in class attributes,
  parameters, containers or made by functions are not tracked.
- A function's row is what its ``@effax.uses(...)`` decorator says; rows are not
  inferred for functions without one, and calls to those are not checked. Inside a
  checked function, a nested ``def`` (or a ``lambda`` held in a variable) counts where
  it is called or handed to an effax control-flow wrapper, and a ``lambda`` written
  as an argument where it is passed. Functions kept in containers are not tracked.
- Handlers are recognised in ``with`` statements: ``X.provide(...)``, ``X.init(...)``,
  ``X.seed(...)``, ``X.collect()``, ``effax.handlers(...)`` and variables holding them.
  Any other context manager from user code may install handlers, so nothing under
  it is reported; those of the standard library, JAX, NumPy and pytest install none.
  A call to ``enter_context(...)`` or ``__enter__()`` silences the rest of its block.

How: the plugin records what it learns in the types it returns (which effect a
declaration or a handler is, which row a function has) as markers in
``Instance.extra_attrs``, which mypy keeps for other modules and in its incremental
cache; it reads the syntax tree only of the function or module being checked. It
keeps no state between hooks, returns ``None`` from every hook that is not about
effax, and a failure of its own analysis never fails the mypy run: the hook falls
back to mypy's default behaviour (set ``EFFAX_MYPY_PLUGIN_DEBUG=1`` to raise
instead). Supported mypy versions: `SUPPORTED_MYPY`; under any other version the
plugin loads with no hooks and says so on stderr.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Final, NamedTuple

from mypy.errorcodes import ErrorCode
from mypy.nodes import (
    ARG_NAMED,
    ARG_POS,
    AssignmentExpr,
    AssignmentStmt,
    Block,
    CallExpr,
    ClassDef,
    Context,
    Decorator,
    Expression,
    ForStmt,
    FuncDef,
    FuncItem,
    IndexExpr,
    LambdaExpr,
    ListExpr,
    MemberExpr,
    MypyFile,
    NameExpr,
    Node,
    OperatorAssignmentStmt,
    OverloadedFuncDef,
    RefExpr,
    Statement,
    SymbolNode,
    TupleExpr,
    TypeInfo,
    Var,
    WithStmt,
)
from mypy.options import Options
from mypy.plugin import CheckerPluginInterface, FunctionContext, MethodContext, Plugin
from mypy.subtypes import is_subtype
from mypy.types import AnyType, CallableType, ExtraAttrs, Instance, Type, get_proper_type

__all__ = ["HANDLER_TYPE", "SUPPORTED_MYPY", "UNDECLARED", "UNHANDLED", "plugin"]

SUPPORTED_MYPY: Final = ((1, 20), (2, 5))
"""The mypy versions the plugin is tested with: at least the first, below the second."""

UNDECLARED: Final = ErrorCode(
    "effax-undeclared",
    "An effect performed outside the function's declared row and not handled there",
    "effax",
)
UNHANDLED: Final = ErrorCode(
    "effax-unhandled", "An effect performed at module level with no handler around it", "effax"
)
HANDLER_TYPE: Final = ErrorCode(
    "effax-handler-type", "A handler given a value its effect cannot carry", "effax"
)

_DEBUG_VARIABLE: Final = "EFFAX_MYPY_PLUGIN_DEBUG"

# --- what effax looks like to the plugin --------------------------------------------

_KINDS: Final = ("Ask", "State", "RandomKey", "Emit")
_OPERATIONS: Final = {
    "Ask": frozenset({"ask"}),
    "State": frozenset({"get", "set", "modify"}),
    "RandomKey": frozenset({"next_key"}),
    "Emit": frozenset({"emit"}),
}
_HANDLER_MAKERS: Final = frozenset({"provide", "init", "seed", "collect"})
_HANDLER_CLASSES: Final = frozenset({"Handler", "Handlers"})
_RNG: Final = "effax._effects.rng"
# effect-aware wrappers that run their callable arguments during the call, with the
# positions and names of those arguments (JAX's signatures)
_PERFORMING: Final = {
    "scan": ((0,), ("f",)),
    "fori_loop": ((2,), ("body_fun",)),
    "while_loop": ((0, 1), ("cond_fun", "body_fun")),
    "cond": ((1, 2), ("true_fun", "false_fun")),
    "switch": ((1,), ("branches",)),
    "map": ((0,), ("f",)),
}
# wrappers returning a function with the row of their first argument
_RETURNING: Final = frozenset(
    {"jit", "grad", "value_and_grad", "vmap", "checkpoint", "remat", "shard_map"}
)
_FUNCTION_NAMES: Final = ("fun", "f", "fn")
# decorators that keep a row as it is
_TRANSPARENT_DECORATORS: Final = frozenset(
    {
        "builtins.staticmethod",
        "builtins.classmethod",
        "abc.abstractmethod",
        "typing.final",
        "typing_extensions.final",
        "typing.override",
        "typing_extensions.override",
    }
)
# context managers from these packages install no effax handlers
_FOREIGN_PACKAGES: Final = frozenset(sys.stdlib_module_names) | {
    "jax",
    "jaxlib",
    "numpy",
    "pytest",
    "_pytest",
    "hypothesis",
    "typing_extensions",
}
_UNHASHABLE_CLASSES: Final = frozenset({"jax._src.basearray.Array", "numpy.ndarray"})

# Markers in `Instance.extra_attrs.immutable` (never valid attribute names):
_EFFECT: Final = "effax-effect:"  # + the declaration's full name, on an effect's type
_STATIC: Final = "effax-static"  # on a static Ask's type
_TRACED: Final = "effax-traced"  # on a traced Ask's type
_HANDLES: Final = "effax-handles"  # on a handler's type, with "effax-handles:<effect>"
_ROW: Final = "effax-row"  # on a function type's fallback, with "effax-row:<effect>"

Row = frozenset[str]  # effects, by the full name of their declaration


def _effax_name(fullname: str | None) -> str | None:
    """`scan` for `effax.scan` or `effax._control.scan`; None for anything else."""
    if not fullname or not fullname.startswith("effax."):
        return None
    parts = fullname.split(".")
    if all(part.startswith("_") for part in parts[1:-1]):
        return parts[-1]
    return None


def _effax_method(fullname: str) -> tuple[str, str] | None:
    """`("Ask", "ask")` for `effax._effects.Ask.ask`; None for anything else."""
    parts = fullname.split(".")
    if len(parts) < 3 or parts[0] != "effax" or parts[-2] not in _KINDS:
        return None
    if not all(part.startswith("_") for part in parts[1:-2]):
        return None
    return parts[-2], parts[-1]


def _kind_of(info: TypeInfo) -> str | None:
    """The effax effect class (`Ask`, ...) that `info` is or derives from."""
    for base in info.mro:
        name = _effax_name(base.fullname)
        if name in _KINDS:
            return name
    return None


def _is_effect_class(info: TypeInfo) -> bool:
    return any(_effax_name(base.fullname) == "Effect" for base in info.mro)


def _callee_fullname(expr: Expression) -> str | None:
    return expr.fullname if isinstance(expr, RefExpr) and expr.fullname else None


def _positional(call: CallExpr) -> list[Expression]:
    """The positional arguments of `call` before any `*args`."""
    out = []
    for arg, kind in zip(call.args, call.arg_kinds, strict=True):
        if kind != ARG_POS:
            break
        out.append(arg)
    return out


def _has_star(call: CallExpr) -> bool:
    return any(kind not in (ARG_POS, ARG_NAMED) for kind in call.arg_kinds)


def _keyword(call: CallExpr, *names: str) -> Expression | None:
    for arg, name in zip(call.args, call.arg_names, strict=True):
        if name in names:
            return arg
    return None


def _function_argument(call: CallExpr) -> Expression | None:
    positional = _positional(call)
    return positional[0] if positional else _keyword(call, *_FUNCTION_NAMES)


def _callable_arguments(call: CallExpr, name: str) -> list[Expression]:
    positions, keywords = _PERFORMING[name]
    positional = _positional(call)
    found = [positional[i] for i in positions if i < len(positional)]
    found.extend(arg for arg in (_keyword(call, k) for k in keywords) if arg is not None)
    flat: list[Expression] = []
    for arg in found:
        if isinstance(arg, ListExpr | TupleExpr):  # switch's branches
            flat.extend(arg.items)
        else:
            flat.append(arg)
    return flat


def _describe(expr: Expression) -> str:
    if isinstance(expr, NameExpr | MemberExpr):
        name = _effax_name(expr.fullname)
        return f"effax.{name}" if name else expr.name
    if isinstance(expr, CallExpr):
        return f"{_describe(expr.callee)}(...)"
    return "this call"


def _short(fullname: str) -> str:
    return fullname.rpartition(".")[2]


def _quoted(row: Row) -> str:
    return ", ".join(f'"{_short(name)}"' for name in sorted(row, key=_short))


# --- markers in types -----------------------------------------------------------------


def _marks(typ: Type | None) -> frozenset[str]:
    proper = get_proper_type(typ) if typ is not None else None
    if isinstance(proper, CallableType):
        proper = proper.fallback
    if isinstance(proper, Instance) and proper.extra_attrs is not None:
        return frozenset(proper.extra_attrs.immutable)
    return frozenset()


def _members(marks: frozenset[str], prefix: str) -> Row:
    start = len(prefix) + 1
    return frozenset(mark[start:] for mark in marks if mark.startswith(prefix + ":"))


def _marked_instance(instance: Instance, marks: set[str]) -> Instance:
    extra = instance.extra_attrs.copy() if instance.extra_attrs else ExtraAttrs({}, set(), None)
    extra.immutable = set(extra.immutable) | marks
    return Instance(
        instance.type,
        instance.args,
        instance.line,
        instance.column,
        last_known_value=instance.last_known_value,
        extra_attrs=extra,
    )


def _marked(typ: Type, marks: set[str]) -> Type:
    """`typ` with `marks` added (to the fallback of a function type)."""
    proper = get_proper_type(typ)
    if isinstance(proper, Instance):
        return _marked_instance(proper, marks)
    if isinstance(proper, CallableType):
        return proper.copy_modified(fallback=_marked_instance(proper.fallback, marks))
    return typ


def _row_marks(row: Row) -> set[str]:
    return {_ROW} | {f"{_ROW}:{name}" for name in row}


def _row_of_type(typ: Type | None) -> Row | None:
    marks = _marks(typ)
    return _members(marks, _ROW) if _ROW in marks else None


def _handles_of_type(typ: Type | None) -> Row | None:
    marks = _marks(typ)
    return _members(marks, _HANDLES) if _HANDLES in marks else None


class Declaration(NamedTuple):
    """A module-level effect declaration, identified by the variable's full name."""

    fullname: str
    kind: str | None  # "Ask", "State", "RandomKey", "Emit", or None for other effects
    static: bool | None  # for an Ask: its `static=`; None where not known


def _declaration_of_type(typ: Type | None) -> Declaration | None:
    proper = get_proper_type(typ) if typ is not None else None
    if not isinstance(proper, Instance):
        return None
    marks = _marks(proper)
    names = [mark[len(_EFFECT) :] for mark in marks if mark.startswith(_EFFECT)]
    if len(names) != 1:
        return None
    static = True if _STATIC in marks else False if _TRACED in marks else None
    return Declaration(names[0], _kind_of(proper.type), static)


# --- the syntax tree -------------------------------------------------------------------

# mypy's visitors are compiled traits that interpreted classes cannot subclass, so
# the walkers below reach the children of a node through its attributes. The names
# cover mypy's statements and expressions; `node` (a reference to a definition) and
# `info` are never followed.
_CHILDREN: Final = (
    "expr",
    "callee",
    "args",
    "rvalue",
    "lvalues",
    "lvalue",
    "base",
    "index",
    "items",
    "left",
    "right",
    "operands",
    "cond",
    "if_expr",
    "else_expr",
    "key",
    "value",
    "left_expr",
    "sequences",
    "condlists",
    "generator",
    "begin_index",
    "end_index",
    "stride",
    "from_expr",
    "msg",
    "subject",
    "guards",
    "call",
    "types",
    "analyzed",
    "body",
    "bodies",
    "handlers",
    "else_body",
    "finally_body",
    "defs",
)


def _children(node: Node) -> Iterator[Node]:
    for name in _CHILDREN:
        yield from _nodes_in(getattr(node, name, None))


def _nodes_in(value: object) -> Iterator[Node]:
    if isinstance(value, Expression | Statement | Block):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _nodes_in(item)


def _blocks(statement: Statement) -> Iterator[Block]:
    """The blocks directly inside a compound statement."""
    return (node for node in _children(statement) if isinstance(node, Block))


def _top_level(statements: list[Statement]) -> Iterator[Statement]:
    """Statements at this level, inside compound statements but not definitions."""
    for statement in statements:
        yield statement
        if not isinstance(statement, FuncDef | Decorator | OverloadedFuncDef | ClassDef):
            for block in _blocks(statement):
                yield from _top_level(block.body)


def _module_binding(module: MypyFile, name: str) -> Expression | None:
    """The value of a module-level variable bound once, by `name = value`."""
    found: list[Expression | None] = []
    for statement in _top_level(module.defs):
        if isinstance(statement, AssignmentStmt):
            for lvalue in statement.lvalues:
                if isinstance(lvalue, NameExpr) and lvalue.name == name:
                    found.append(statement.rvalue)
                elif isinstance(lvalue, TupleExpr | ListExpr) and any(
                    isinstance(item, NameExpr) and item.name == name for item in lvalue.items
                ):
                    found.append(None)
    return found[0] if len(found) == 1 else None


class _Locals:
    """Collects the bindings of local variables, and the nested functions and lambdas."""

    def __init__(self, *, functions: bool) -> None:
        self.values: dict[SymbolNode, list[Expression | None]] = {}
        self.functions: set[FuncItem] = set()
        self.descend = functions  # False at module level: defs there have no inferred row

    def bind(self, lvalue: Expression, value: Expression | None) -> None:
        if isinstance(lvalue, NameExpr) and lvalue.node is not None:
            self.values.setdefault(lvalue.node, []).append(value)
        elif isinstance(lvalue, TupleExpr | ListExpr):
            for item in lvalue.items:
                self.bind(item, None)

    def visit(self, node: Node) -> None:
        if isinstance(node, AssignmentStmt):
            for lvalue in node.lvalues:
                self.bind(lvalue, node.rvalue)
        elif isinstance(node, OperatorAssignmentStmt):
            self.bind(node.lvalue, None)
        elif isinstance(node, ForStmt):
            self.bind(node.index, None)
        elif isinstance(node, WithStmt):
            for expr, target in zip(node.expr, node.target, strict=True):
                if target is not None:
                    self.bind(target, expr)
        elif isinstance(node, AssignmentExpr):
            self.bind(node.target, node.value)
        elif isinstance(node, ClassDef | OverloadedFuncDef):
            return
        if isinstance(node, Decorator):
            if self.descend:
                self.visit(node.func)
        elif isinstance(node, FuncItem):
            if self.descend or isinstance(node, LambdaExpr):
                self.functions.add(node)
                self.visit(node.body)
        else:
            for child in _children(node):
                self.visit(child)


Sink = Callable[[Context, Row, "str | None"], None]


class _Analysis:
    """What one function body or module top level does with effects.

    Everything it resolves is a lower bound of what is performed and an upper bound
    of what is handled: where it cannot tell, it answers so that nothing is reported.
    """

    def __init__(
        self, modules: Mapping[str, MypyFile], root: FuncItem | None, body: list[Statement]
    ) -> None:
        self.modules = modules
        collector = _Locals(functions=root is not None)
        for statement in body:
            collector.visit(statement)
        self.locals = collector.values
        self.nested = collector.functions
        self.self_class: dict[SymbolNode, TypeInfo] = {}
        if isinstance(root, FuncDef) and root.info and root.arguments and not root.is_static:
            self.self_class[root.arguments[0].variable] = root.info
        self._demands: dict[FuncItem, Row] = {}

    # -- names

    def module_binding(self, var: Var) -> Expression | None:
        """A module-level variable's value, where its module's tree is still there
        (mypy frees a module's tree once it has checked it)."""
        module_name, _, name = var.fullname.rpartition(".")
        module = self.modules.get(module_name)
        if module is None or module.is_cache_skeleton:
            return None
        symbol = module.names.get(name)
        if symbol is None or symbol.node is not var:
            return None
        return _module_binding(module, name)

    def value_of(self, expr: Expression) -> Expression | None:
        if not isinstance(expr, RefExpr) or not isinstance(expr.node, Var):
            return None
        values = self.locals.get(expr.node)
        if values is not None:
            return values[0] if len(values) == 1 else None
        return self.module_binding(expr.node)

    def declaration(self, expr: Expression, depth: int = 0) -> Declaration | None:
        """The effect `expr` refers to, where it is a module-level declaration."""
        if depth > 20 or not isinstance(expr, RefExpr) or not isinstance(expr.node, Var):
            return None
        if expr.node not in self.locals:  # a local's type is its first value's
            found = _declaration_of_type(expr.node.type)
            if found is not None:
                return found
        value = self.value_of(expr)
        if isinstance(value, RefExpr):
            return self.declaration(value, depth + 1)  # an alias
        if isinstance(value, CallExpr) and expr.node.fullname.count("."):
            # a declaration whose type mypy has not inferred yet (it is further down)
            return _declaration_in(value, expr.node.fullname)
        return None

    def instance_class(self, expr: Expression, depth: int = 0) -> TypeInfo | None:
        """The class of the instance `expr` evaluates to, where it is plain to see."""
        if depth > 20:
            return None
        if isinstance(expr, CallExpr):
            callee = expr.callee
            if isinstance(callee, RefExpr) and isinstance(callee.node, TypeInfo):
                return callee.node
            return None
        if not isinstance(expr, RefExpr) or not isinstance(expr.node, Var):
            return None
        var = expr.node
        if var in self.self_class:
            return self.self_class[var]
        typ = get_proper_type(var.type)
        if isinstance(typ, Instance):
            return typ.type
        value = self.value_of(expr)
        return self.instance_class(value, depth + 1) if value is not None else None

    # -- rows

    def declared_row(self, call: CallExpr, *, complete: bool) -> Row | None:
        """The effects named by `effax.uses(...)`; with `complete`, None unless all are
        known (a row must be exact to check a body; a lower bound does for calls)."""
        found = set()
        for arg, kind in zip(call.args, call.arg_kinds, strict=True):
            declaration = self.declaration(arg) if kind == ARG_POS else None
            if declaration is not None:
                found.add(declaration.fullname)
            elif complete:
                return None
        return frozenset(found)

    def decorator_row(self, decorator: Decorator) -> Row | None:
        decorators = decorator.original_decorators or decorator.decorators
        if not decorators:  # loaded from mypy's cache: the type says it
            return _row_of_type(decorator.var.type)
        row: Row | None = None
        known = True  # every decorator is effax's own or keeps the row
        for expr in reversed(decorators):
            if _is_uses(expr):
                assert isinstance(expr, CallExpr)
                row = self.declared_row(expr, complete=False)
                known = True
            elif _transparent(expr):
                continue
            elif row is not None:
                return None  # an unknown decorator around the row
            else:
                known = False
        if row is None and known and decorator.func in self.nested:
            return self.demand_of(decorator.func)
        return row

    def member_row(self, info: TypeInfo, name: str) -> Row | None:
        symbol = info.get(name)
        if symbol is not None and isinstance(symbol.node, Decorator):
            return self.decorator_row(symbol.node)
        return None

    def row_of(self, expr: Expression, depth: int = 0) -> Row | None:
        """The effects that calling `expr` performs, where they are known, or None."""
        if depth > 20:
            return None
        if isinstance(expr, LambdaExpr):
            return self.demand_of(expr)
        if isinstance(expr, CallExpr):
            return self.row_of_result(expr, depth)
        if not isinstance(expr, RefExpr):
            return None
        node = expr.node
        if isinstance(node, Decorator):
            return self.decorator_row(node)
        if isinstance(node, FuncDef):
            return self.demand_of(node) if node in self.nested else None
        if isinstance(node, Var):
            if node not in self.locals:
                row = _row_of_type(node.type)
                if row is not None:
                    return row
            value = self.value_of(expr)
            if value is not None:
                return self.row_of(value, depth + 1)
            info = self.instance_class(expr)
            return self.member_row(info, "__call__") if info is not None else None
        if isinstance(expr, MemberExpr):
            if isinstance(expr.expr, RefExpr) and isinstance(expr.expr.node, TypeInfo):
                return self.member_row(expr.expr.node, expr.name)
            info = self.instance_class(expr.expr)
            return self.member_row(info, expr.name) if info is not None else None
        return None

    def row_of_result(self, call: CallExpr, depth: int) -> Row | None:
        """The row of the function that `call` returns."""
        callee = call.callee
        name = _effax_name(_callee_fullname(callee))
        if name == "handle":
            positional = _positional(call)
            if not positional or _has_star(call):
                return None
            row = self.row_of(positional[0], depth + 1)
            for handler in positional[1:]:
                discharged = self.discharged(handler)
                if row is None or discharged is None:
                    return None
                row = row - discharged
            return row
        if name in _RETURNING:
            function = _function_argument(call)
            return self.row_of(function, depth + 1) if function is not None else None
        if isinstance(callee, CallExpr):
            if _is_uses(callee):  # effax.uses(...)(f)
                return self.declared_row(callee, complete=False)
            if _effax_name(_callee_fullname(callee.callee)) in _RETURNING:  # jit(**kw)(f)
                function = _function_argument(call)
                return self.row_of(function, depth + 1) if function is not None else None
            return None
        if _callee_fullname(callee) == "functools.partial":
            function = _function_argument(call)
            return self.row_of(function, depth + 1) if function is not None else None
        if isinstance(callee, RefExpr) and isinstance(callee.node, TypeInfo):
            return self.member_row(callee.node, "__call__")
        return None

    def demand_of(self, function: FuncItem) -> Row:
        """The effects a nested function or lambda performs and does not handle."""
        if function in self._demands:
            return self._demands[function]
        self._demands[function] = frozenset()  # while recursing
        missing: set[str] = set()
        _Walker(self, lambda node, row, who: missing.update(row)).visit(function.body)
        self._demands[function] = frozenset(missing)
        return self._demands[function]

    # -- handlers

    def discharged(self, expr: Expression, depth: int = 0) -> Row | None:
        """The effect a handler expression handles, or None where it is not known."""
        if depth > 20:
            return None
        if (
            isinstance(expr, CallExpr)
            and isinstance(expr.callee, MemberExpr)
            and expr.callee.name in _HANDLER_MAKERS
        ):
            declaration = self.declaration(expr.callee.expr)
            return frozenset({declaration.fullname}) if declaration is not None else None
        if isinstance(expr, RefExpr) and isinstance(expr.node, Var):
            if expr.node not in self.locals:
                handles = _handles_of_type(expr.node.type)
                if handles is not None:
                    return handles
            value = self.value_of(expr)
            return self.discharged(value, depth + 1) if value is not None else None
        return None

    def installed(self, expr: Expression, depth: int = 0) -> Row | None:
        """What a `with` item handles: a set of effects, or None for 'maybe anything'."""
        if depth > 20:
            return None
        discharged = self.discharged(expr)
        if discharged is not None:
            return discharged
        if isinstance(expr, CallExpr):
            if _effax_name(_callee_fullname(expr.callee)) == "handlers":
                if _has_star(expr):
                    return None
                found: set[str] = set()
                for arg in expr.args:
                    row = self.discharged(arg)
                    if row is None:
                        return None
                    found |= row
                return frozenset(found)
            return frozenset() if self.foreign(expr.callee) else None
        value = self.value_of(expr)
        if value is not None:
            return self.installed(value, depth + 1)
        info = self.instance_class(expr)
        return frozenset() if info is not None and _foreign_class(info) else None

    def foreign(self, callee: Expression) -> bool:
        """Whether calling `callee` makes a context manager that installs no handler."""
        if isinstance(callee, RefExpr) and isinstance(callee.node, TypeInfo):
            return _foreign_class(callee.node)
        fullname = _callee_fullname(callee)
        if fullname:
            return fullname.partition(".")[0] in _FOREIGN_PACKAGES
        if isinstance(callee, MemberExpr):
            info = self.instance_class(callee.expr)
            return info is not None and _foreign_class(info)
        return False

    # -- what a call performs

    def performed(self, call: CallExpr) -> tuple[Row, str | None] | None:
        """The effects `call` performs, and who performs them (None: an operation)."""
        callee = call.callee
        if isinstance(callee, MemberExpr):
            declaration = self.declaration(callee.expr)
            if declaration is not None:
                if declaration.kind and callee.name in _OPERATIONS[declaration.kind]:
                    return frozenset({declaration.fullname}), None
                return None
        fullname = _callee_fullname(callee)
        if fullname and fullname.startswith("effax.random."):
            stream = _keyword(call, "stream")
            if stream is None:
                return frozenset({_RNG}), None
            declaration = self.declaration(stream)
            return (frozenset({declaration.fullname}), None) if declaration else None
        name = _effax_name(fullname)
        if name is not None and name in _PERFORMING:
            found: set[str] = set()
            for function in _callable_arguments(call, name):
                passed = isinstance(function, LambdaExpr) and any(
                    function is arg for arg in call.args
                )
                if not passed:  # a lambda passed as an argument is walked as such
                    found |= self.row_of(function) or frozenset()
            return frozenset(found), f"effax.{name}"
        if isinstance(callee, LambdaExpr):
            return None
        row = self.row_of(callee)
        return (row, _describe(callee)) if row else None


def _declaration_in(value: CallExpr, fullname: str) -> Declaration | None:
    """The declaration `fullname = value`, if `value` constructs an effect."""
    callee = value.callee.base if isinstance(value.callee, IndexExpr) else value.callee
    if not isinstance(callee, RefExpr) or not isinstance(callee.node, TypeInfo):
        return None
    if not _is_effect_class(callee.node):
        return None
    static: bool | None = False
    flag = _keyword(value, "static")
    if flag is not None:
        literal = flag.fullname if isinstance(flag, NameExpr) else None
        static = {"builtins.True": True, "builtins.False": False}.get(literal or "")
    return Declaration(fullname, _kind_of(callee.node), static)


def _is_uses(expr: Expression) -> bool:
    return isinstance(expr, CallExpr) and _effax_name(_callee_fullname(expr.callee)) == "uses"


def _transparent(expr: Expression) -> bool:
    """Whether a decorator keeps the row of what it decorates."""
    fullname = _callee_fullname(expr)
    if fullname in _TRANSPARENT_DECORATORS or _effax_name(fullname) in _RETURNING:
        return True
    # effax.jit(static_argnames=...) and friends
    return (
        isinstance(expr, CallExpr)
        and all(kind == ARG_NAMED for kind in expr.arg_kinds)
        and _effax_name(_callee_fullname(expr.callee)) in _RETURNING
    )


def _foreign_class(info: TypeInfo) -> bool:
    if any(_effax_name(base.fullname) in _HANDLER_CLASSES for base in info.mro):
        return False
    if _effax_name(info.fullname) == "JitAwareContextVar":
        return True
    return info.fullname.partition(".")[0] in _FOREIGN_PACKAGES


class _Walker:
    """Walks statements, tracking the handlers that enclosing `with`s install, and
    passes what each call performs and no handler covers to `sink`."""

    def __init__(self, analysis: _Analysis, sink: Sink) -> None:
        self.analysis = analysis
        self.sink = sink
        self.handled: Row | None = frozenset()  # None: anything may be handled

    def visit(self, node: Node) -> None:
        if isinstance(node, Block):
            if not node.is_unreachable:
                for statement in node.body:
                    self.visit(statement)
        elif isinstance(node, FuncDef | OverloadedFuncDef | ClassDef):
            pass  # a nested def counts where it is called
        elif isinstance(node, Decorator):
            for expr in node.decorators:
                self.visit(expr)
        elif isinstance(node, LambdaExpr):
            pass  # counts where it is called or passed to a call: see visit_call
        elif isinstance(node, WithStmt):
            self.visit_with(node)
        elif isinstance(node, CallExpr):
            self.visit_call(node)
        else:
            for child in _children(node):
                self.visit(child)

    def visit_with(self, node: WithStmt) -> None:
        outer = self.handled
        installed: Row | None = frozenset()
        for expr in node.expr:
            self.visit(expr)
            row = self.analysis.installed(expr)
            installed = None if row is None or installed is None else installed | row
        if self.handled is not None:
            self.handled = None if installed is None else self.handled | installed
        self.visit(node.body)
        self.handled = outer

    def visit_call(self, node: CallExpr) -> None:
        name = _effax_name(_callee_fullname(node.callee))
        skip: Expression | None = None
        if name == "handle" or name in _RETURNING:
            function = _function_argument(node)
            if isinstance(function, LambdaExpr):
                skip = function  # performed where the returned function is called
        for child in [node.callee, *node.args]:
            if isinstance(child, LambdaExpr):
                if child is not skip:
                    self.visit(child.body)  # a lambda counts where it is handed over
            else:
                self.visit(child)
        performed = self.analysis.performed(node)
        if performed is not None and self.handled is not None:
            row, who = performed
            missing = row - self.handled
            if missing:
                self.sink(node, missing, who)
        callee = node.callee
        if isinstance(callee, MemberExpr) and callee.name in (
            "enter_context",
            "enter_async_context",
            "__enter__",
        ):
            self.handled = None  # handlers installed by hand, for the rest of the block


# --- the plugin ----------------------------------------------------------------------


class EffaxPlugin(Plugin):
    """Checks effect rows; see the module docstring."""

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self._debug = os.environ.get(_DEBUG_VARIABLE) == "1"

    # -- hook selection: effax's own functions, and functions with a row

    def get_function_hook(self, fullname: str) -> Callable[[FunctionContext], Type] | None:
        name = _effax_name(fullname)
        if name in _KINDS:
            return self._declare
        if name == "uses":
            return self._uses
        if name == "handle":
            return self._handled
        if name in _RETURNING:
            return self._through
        if name == "handlers":
            return self._handlers
        if (name is not None and name in _PERFORMING) or fullname.startswith("effax.random."):
            return self._module_level
        if self._has_row(fullname):
            return self._module_level
        return None

    def get_method_hook(self, fullname: str) -> Callable[[MethodContext], Type] | None:
        method = _effax_method(fullname)
        if method is not None:
            kind, name = method
            if name in _OPERATIONS[kind]:
                return self._module_level
            if name in _HANDLER_MAKERS:
                return self._handler
            return None
        if self._has_row(fullname):
            return self._module_level
        return None

    def _has_row(self, fullname: str) -> bool:
        """Whether `fullname` names a function with an effect row (a call of one is
        checked here at module level; inside functions, from their `effax.uses`)."""
        if fullname.startswith(("builtins.", "typing.", "effax.", "jax.", "numpy.")):
            return False
        try:
            symbol = self.lookup_fully_qualified(fullname) if "." in fullname else None
            node = symbol.node if symbol is not None else None
            if isinstance(node, Decorator):
                if _row_of_type(node.var.type) is not None:
                    return True
                decorators = node.original_decorators or node.decorators
                return any(
                    _is_uses(d) or _effax_name(_callee_fullname(_callee(d) or d)) in _RETURNING
                    for d in decorators
                )
            if isinstance(node, Var):
                return _row_of_type(node.type) is not None
        except Exception:
            if self._debug:
                raise
        return False

    def _module_map(self) -> Mapping[str, MypyFile]:
        modules: Mapping[str, MypyFile] | None = getattr(self, "_modules", None)
        return modules or {}

    def _guarded(self, check: Callable[[], None]) -> None:
        """Run one analysis; a failure of the plugin must not fail the user's mypy run."""
        try:
            check()
        except Exception:
            if self._debug:
                raise

    # -- hooks that mark types

    def _declare(self, ctx: FunctionContext) -> Type:
        """`name = effax.Ask[T]("name")` at module level: mark the effect's type."""
        result: list[Type] = [ctx.default_return_type]

        def check() -> None:
            stack = _scope_stack(ctx.api)
            if len(stack) != 1 or not isinstance(stack[0], MypyFile):
                return
            module = stack[0]
            for statement in _top_level(module.defs):
                if (
                    isinstance(statement, AssignmentStmt)
                    and statement.rvalue is ctx.context
                    and len(statement.lvalues) == 1
                    and isinstance(statement.lvalues[0], NameExpr)
                ):
                    assert isinstance(ctx.context, CallExpr)
                    fullname = f"{module.fullname}.{statement.lvalues[0].name}"
                    declaration = _declaration_in(ctx.context, fullname)
                    if declaration is None:
                        return
                    marks = {_EFFECT + fullname}
                    if declaration.static is not None and declaration.kind == "Ask":
                        marks.add(_STATIC if declaration.static else _TRACED)
                    result[0] = _marked(ctx.default_return_type, marks)
                    return

        self._guarded(check)
        return result[0]

    def _uses(self, ctx: FunctionContext) -> Type:
        """`effax.uses(...)`: mark the decorated function's row, check its body."""
        result: list[Type] = [ctx.default_return_type]

        def mark() -> None:
            row: set[str] = set()
            for typ in ctx.arg_types[0] if ctx.arg_types else ():
                declaration = _declaration_of_type(typ)
                if declaration is None:
                    return
                row.add(declaration.fullname)
            decorator = get_proper_type(ctx.default_return_type)
            if isinstance(decorator, CallableType):
                marked = _marked(decorator.ret_type, _row_marks(frozenset(row)))
                result[0] = decorator.copy_modified(ret_type=marked)

        self._guarded(mark)
        self._guarded(lambda: self._check_function(ctx.api, ctx.context))
        return result[0]

    def _handled(self, ctx: FunctionContext) -> Type:
        return self._through(ctx, handle=True)

    def _through(self, ctx: FunctionContext, *, handle: bool = False) -> Type:
        """`effax.handle(f, *handlers)`, `effax.jit(f)`, `effax.grad(f)`, ...: the
        returned function's row is `f`'s, minus what the handlers discharge."""
        result: list[Type] = [ctx.default_return_type]

        def mark() -> None:
            if not ctx.arg_types or not ctx.arg_types[0]:
                return  # a decorator factory, e.g. effax.jit(static_argnames=...)
            row = _row_of_type(ctx.arg_types[0][0])
            if row is None:
                return
            if handle:
                for typ in ctx.arg_types[1] if len(ctx.arg_types) > 1 else ():
                    handles = _handles_of_type(typ)
                    if handles is None:
                        return
                    row = row - handles
            result[0] = _marked(ctx.default_return_type, _row_marks(row))

        self._guarded(mark)
        return result[0]

    def _handler(self, ctx: MethodContext) -> Type:
        """`X.provide(v)`, `X.init(v)`, `X.seed(k)`, `X.collect()`: mark the handler's
        effect, and check the value (rule 3)."""
        result: list[Type] = [ctx.default_return_type]

        def mark() -> None:
            declaration = _declaration_of_type(ctx.type)
            if declaration is not None:
                marks = {_HANDLES, f"{_HANDLES}:{declaration.fullname}"}
                result[0] = _marked(ctx.default_return_type, marks)

        self._guarded(mark)
        self._guarded(lambda: self._check_value(ctx))
        return result[0]

    def _handlers(self, ctx: FunctionContext) -> Type:
        """`effax.handlers(*handlers)`: the union of what they handle."""
        result: list[Type] = [ctx.default_return_type]

        def mark() -> None:
            if len(ctx.arg_kinds) != 1 or any(k != ARG_POS for k in ctx.arg_kinds[0]):
                return
            found: set[str] = set()
            for typ in ctx.arg_types[0]:
                handles = _handles_of_type(typ)
                if handles is None:
                    return
                found |= handles
            marks = {_HANDLES} | {f"{_HANDLES}:{name}" for name in found}
            result[0] = _marked(ctx.default_return_type, marks)

        self._guarded(mark)
        return result[0]

    def _module_level(self, ctx: FunctionContext | MethodContext) -> Type:
        self._guarded(lambda: self._check_module(ctx.api))
        return ctx.default_return_type

    # -- rules 1 and 2 inside a function with a row

    def _check_function(self, api: CheckerPluginInterface, call: Context) -> None:
        stack = _scope_stack(api)
        decorator = _find_decorator(stack[-1], call) if stack else None
        if decorator is None:
            return
        # Several rows on one function: the innermost one governs the body.
        decorators = decorator.original_decorators or decorator.decorators
        if next((d for d in reversed(decorators) if _is_uses(d)), None) is not call:
            return
        assert isinstance(call, CallExpr)
        function = decorator.func
        analysis = _Analysis(self._module_map(), function, function.body.body)
        row = analysis.declared_row(call, complete=True)
        if row is None:
            return  # a row we cannot read: no guessing
        owner = f"{function.info.name}.{function.name}" if function.info else function.name
        where = f'the effect row of "{owner}" (effax.uses({", ".join(sorted(map(_short, row)))}))'

        def report(node: Context, missing: Row, who: str | None) -> None:
            missing = missing - row
            if not missing:
                return
            noun = "effect" if len(missing) == 1 else "effects"
            if who is None:
                verb = "is" if len(missing) == 1 else "are"
                subject = f"{noun.capitalize()} {_quoted(missing)} {verb}"
            else:
                subject = f'"{who}" performs {noun} {_quoted(missing)},'
            message = f'{subject} neither in {where} nor handled by an enclosing "with"'
            api.fail(message, node, code=UNDECLARED)

        _Walker(analysis, report).visit(function.body)

    # -- rules 1 and 2 at module level

    def _check_module(self, api: CheckerPluginInterface) -> None:
        stack = _scope_stack(api)
        if not stack or not isinstance(stack[0], MypyFile):
            return
        if not all(isinstance(scope, LambdaExpr) for scope in stack[1:]):
            return  # inside a function: its row, if any, is checked from `effax.uses`
        module = stack[0]
        analysis = _Analysis(self._module_map(), None, module.defs)

        def report(node: Context, missing: Row, who: str | None) -> None:
            noun = "effect" if len(missing) == 1 else "effects"
            if who is None:
                verb = "is" if len(missing) == 1 else "are"
                subject = f"{noun.capitalize()} {_quoted(missing)} {verb} performed"
            else:
                subject = f'"{who}" performs {noun} {_quoted(missing)}'
            message = f'{subject} at module level, where no enclosing "with" handles it'
            api.fail(message, node, code=UNHANDLED)

        walker = _Walker(analysis, report)
        for statement in module.defs:
            walker.visit(statement)

    # -- rule 3

    def _check_value(self, ctx: MethodContext) -> None:
        call = ctx.context
        if not isinstance(call, CallExpr) or not isinstance(call.callee, MemberExpr):
            return
        receiver = get_proper_type(ctx.type)
        declaration = _declaration_of_type(receiver)
        if declaration is None or not isinstance(receiver, Instance):
            return
        if not ctx.arg_types or not ctx.arg_types[0]:
            return
        value = get_proper_type(ctx.arg_types[0][0])
        if isinstance(value, AnyType):
            return
        if receiver.args and not is_subtype(value, receiver.args[0]):
            return  # a type error already: mypy reports it
        kind, method = declaration.kind, call.callee.name
        effect = f'{kind} "{_short(declaration.fullname)}"'
        problem: str | None = None
        if kind == "Ask" and declaration.static and not _hashable(ctx.api, value):
            problem = (
                f"{effect} is static, so its value is hashed into the jit cache key, but "
                f'"{method}" is given an unhashable "{_type_name(value)}"; pass a hashable '
                "value (a tuple, a frozen dataclass) or declare it with static=False"
            )
        elif (kind == "State" or declaration.static is False) and _is_text(value):
            problem = (
                f"{effect} is traced, so its value crosses jax.jit as an array, but "
                f'"{method}" is given a "{_type_name(value)}"'
                + ("; declare it with static=True" if kind == "Ask" else "")
            )
        elif kind == "State" and receiver.args:
            declared = get_proper_type(receiver.args[0])
            narrower = _narrower(declared, value)
            if narrower is not None:
                problem = (
                    f'{effect} holds "{_type_name(declared)}" values but is initialised with '
                    f'"{narrower}": its dtype would change on the first update inside a '
                    f"traced region; initialise it with a {_type_name(declared)}"
                )
        if problem is not None:
            ctx.api.fail(problem, call, code=HANDLER_TYPE)


def _callee(expr: Expression) -> Expression | None:
    return expr.callee if isinstance(expr, CallExpr) else None


def _scope_stack(api: CheckerPluginInterface) -> list[object]:
    scope = getattr(api, "scope", None)
    stack = getattr(scope, "stack", None)
    return list(stack) if isinstance(stack, list) else []


def _find_decorator(scope: object, call: Context) -> Decorator | None:
    """The decorated definition in `scope`, one of whose decorators is `call`."""
    if isinstance(scope, MypyFile):
        statements = scope.defs
    elif isinstance(scope, TypeInfo):
        statements = scope.defn.defs.body
    elif isinstance(scope, FuncItem):
        statements = scope.body.body
    else:
        return None
    for statement in _top_level(statements):
        if isinstance(statement, Decorator):
            decorators = statement.original_decorators or statement.decorators
            if any(d is call for d in decorators):
                return statement
    return None


def _hashable(api: CheckerPluginInterface, typ: Type) -> bool:
    proper = get_proper_type(typ)
    if isinstance(proper, Instance) and any(
        base.fullname in _UNHASHABLE_CLASSES for base in proper.type.mro
    ):
        return False
    return is_subtype(typ, api.named_generic_type("typing.Hashable", []))


def _is_text(typ: Type) -> bool:
    proper = get_proper_type(typ)
    return isinstance(proper, Instance) and proper.type.fullname in (
        "builtins.str",
        "builtins.bytes",
    )


# mypy promotes the right-hand types to the left-hand one; JAX gives them another dtype
_PROMOTED: Final = {
    "builtins.float": ("builtins.int", "builtins.bool"),
    "builtins.complex": ("builtins.int", "builtins.bool", "builtins.float"),
    "builtins.int": ("builtins.bool",),
}


def _narrower(declared: Type, value: Type) -> str | None:
    """The name of `value`'s type where mypy promotes it to `declared`'s."""
    declared, value = get_proper_type(declared), get_proper_type(value)
    if not isinstance(declared, Instance) or not isinstance(value, Instance):
        return None
    if value.type.fullname in _PROMOTED.get(declared.type.fullname, ()):
        return value.type.name
    return None


def _type_name(typ: Type) -> str:
    proper = get_proper_type(typ)
    return proper.type.name if isinstance(proper, Instance) else str(proper)


class _Disabled(Plugin):
    """What an unsupported mypy version gets: no hooks at all."""


def _version(version: str) -> tuple[int, int]:
    numbers = []
    for part in version.split("+")[0].split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        numbers.append(int(digits) if digits else 0)
    while len(numbers) < 2:
        numbers.append(0)
    return numbers[0], numbers[1]


def plugin(version: str) -> type[Plugin]:
    """mypy's entry point: the plugin class for this mypy `version`."""
    low, high = SUPPORTED_MYPY
    if not low <= _version(version) < high:
        sys.stderr.write(
            f"effax_stubs.mypy_plugin supports mypy >={low[0]}.{low[1]},<{high[0]}.{high[1]} "
            f"but runs under mypy {version}: effect rows are not checked.\n"
        )
        return _Disabled
    return EffaxPlugin

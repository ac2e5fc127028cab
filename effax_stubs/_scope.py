"""What the names of one function body or module top level refer to: its locals,
effect declarations (from any module), instances and their classes, tuples spread
into calls. `_rows.Analysis` builds on it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from mypy.nodes import (
    ARG_NAMED,
    ARG_POS,
    ARG_STAR,
    CallExpr,
    Expression,
    FuncDef,
    FuncItem,
    IndexExpr,
    IntExpr,
    ListExpr,
    MemberExpr,
    MypyFile,
    RefExpr,
    Statement,
    SymbolNode,
    TupleExpr,
    TypeInfo,
    Var,
)
from mypy.types import Instance, TupleType, get_proper_type

from ._marks import Declaration, declaration_in, declaration_of_type
from ._names import Row, callee_fullname
from ._tree import Locals, binding_in_module, index_of

__all__ = ["FORWARDED", "Scope", "trigger", "triggered", "triggered_effect"]

# In a set of handled effects: an interceptor of the effect named after it is
# installed with no handler of it outside (never an effect's name: it has a space)
FORWARDED: Final = "forwarded to nothing: "
# In a set of handled effects: an interceptor of the first effect is installed whose
# code performs the second, which no handler outside it handles (`trigger`)
_TRIGGER: Final = "effax-trigger\x00"


def trigger(intercepted: str, missing: str, who: str) -> str:
    """The mark of an interceptor of `intercepted` (described as `who`) whose code
    performs `missing` with nothing outside it to handle it."""
    return f"{_TRIGGER}{intercepted}\x00{missing}\x00{who}"


def triggered_effect(mark: str) -> str | None:
    """The effect whose operations trigger the interceptor `mark` is about, or None."""
    return mark.split("\x00")[1] if mark.startswith(_TRIGGER) else None


def triggered(row: Row, handled: Row) -> list[tuple[Row, str]]:
    """What the interceptors' code around performs and nothing handles, where
    performing `row` reaches them: (the effects, who performs them) for each one."""
    found: dict[str, set[str]] = {}
    for mark in handled:
        if mark.startswith(_TRIGGER):
            _, intercepted, missing, who = mark.split("\x00")
            if intercepted in row:
                found.setdefault(who, set()).add(missing)
    return [(frozenset(missing), who) for who, missing in sorted(found.items())]


class Scope:
    """The names of one function body (`root`) or module top level."""

    def __init__(
        self, modules: Mapping[str, MypyFile], root: FuncItem | None, body: list[Statement]
    ) -> None:
        self.modules = modules
        collector = Locals(functions=root is not None)
        for statement in body:
            collector.visit(statement)
        self.locals = collector.values
        # a local's value where one use of it reads it (by id of the name), as the
        # walk finds it in order (a variable rebound: the binding before the use)
        self.bound_at: dict[int, Expression | None] = {}
        # a lambda's parameters, where what it is called with is plain to see
        self.arguments: dict[SymbolNode, Expression] = {}
        self.nested = collector.functions
        self.self_class: dict[SymbolNode, TypeInfo] = {}
        self.class_objects: set[SymbolNode] = set()  # a classmethod's `cls`: the class
        if isinstance(root, FuncDef) and root.info and root.arguments and not root.is_static:
            self.self_class[root.arguments[0].variable] = root.info
            if root.is_class:
                self.class_objects.add(root.arguments[0].variable)

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
        return binding_in_module(module, name)

    def rebound(self, var: Var) -> bool:
        """Whether the module-level variable `var` is bound more than once, where its
        module's tree is still there: its type is its first value's, and which value
        a function reads depends on when it runs."""
        module_name, _, name = var.fullname.rpartition(".")
        module = self.modules.get(module_name)
        if module is None or module.is_cache_skeleton:
            return False
        return len(index_of(module.defs).bindings.get(name, ())) > 1

    def unanswered(self, row: Row, handled: Row) -> Row:
        """`row` less the `Ask`s declared with `default=`, which need no handler: where
        none is installed, `ask()` answers the default; but not where an interceptor
        of it is installed with no handler of it outside (`handled` says so, with
        `FORWARDED`): the interceptor forwards there, and nothing answers."""
        return frozenset(
            name for name in row if not self.has_default(name) or FORWARDED + name in handled
        )

    def has_default(self, fullname: str) -> bool:
        """Whether the effect declared as `fullname` is an `Ask` with a default: read
        from its variable's type (from any module, and mypy's cache), or from its
        declaration where mypy has not inferred that type yet."""
        module_name, _, name = fullname.rpartition(".")
        module = self.modules.get(module_name)
        symbol = module.names.get(name) if module is not None else None
        var = symbol.node if symbol is not None else None
        if not isinstance(var, Var) or var.fullname != fullname:
            return False
        declaration = declaration_of_type(var.type)
        if declaration is None:
            value = self.module_binding(var)
            if isinstance(value, CallExpr):
                declaration = declaration_in(value, fullname)
        return declaration is not None and declaration.default

    def value_of(self, expr: Expression) -> Expression | None:
        if not isinstance(expr, RefExpr) or not isinstance(expr.node, Var):
            return None
        if id(expr) in self.bound_at:
            return self.bound_at[id(expr)]
        if expr.node in self.arguments:
            return self.arguments[expr.node]
        values = self.locals.get(expr.node)
        if values is not None:
            return values[0] if len(values) == 1 else None
        return self.module_binding(expr.node)

    def bind_arguments(self, function: FuncItem, values: list[Expression | None]) -> None:
        """What `function`'s parameters get, where it is called with `values` (a
        lambda given to control flow with its operands, or called where made)."""
        for argument, value in zip(function.arguments, values, strict=False):
            if value is not None and argument.kind == ARG_POS:
                self.arguments[argument.variable] = value

    def item(self, expr: IndexExpr) -> Expression | None:
        """The item `expr` reads, where it indexes a tuple or list plain to see with
        a number (`carry[0]`, the carry bound to `(block, x)`)."""
        base = expr.base
        value = self.value_of(base) if isinstance(base, RefExpr) else base
        if isinstance(value, TupleExpr | ListExpr) and isinstance(expr.index, IntExpr):
            position = expr.index.value
            return (
                value.items[position] if -len(value.items) <= position < len(value.items) else None
            )
        return None

    def declaration(self, expr: Expression, depth: int = 0) -> Declaration | None:
        """The effect `expr` refers to, where it is a module-level declaration."""
        if depth > 20 or not isinstance(expr, RefExpr) or not isinstance(expr.node, Var):
            return None
        if expr.node not in self.locals:  # a local's type is its first value's
            found = declaration_of_type(expr.node.type)
            if found is not None:
                return found
        value = self.value_of(expr)
        if isinstance(value, RefExpr):
            return self.declaration(value, depth + 1)  # an alias
        if isinstance(value, CallExpr) and expr.node.fullname.count("."):
            # a declaration whose type mypy has not inferred yet (it is further down)
            return declaration_in(value, expr.node.fullname)
        return None

    def method_fullname(self, callee: MemberExpr) -> str | None:
        """The full name of the method `callee` names (`builtins.list.sort` for
        `xs.sort`), as its receiver's class or a base defines it; None where the
        receiver's class is not plain to see."""
        info = self.instance_class(callee.expr)
        for base in info.mro if info is not None else ():
            if callee.name in base.names:
                return f"{base.fullname}.{callee.name}"
        return None

    def instance_class(self, expr: Expression, depth: int = 0) -> TypeInfo | None:
        """The class of the instance `expr` evaluates to, where it is plain to see."""
        if depth > 20:
            return None
        if isinstance(expr, CallExpr):
            return self.constructed(expr.callee, depth + 1)
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

    def constructed(self, callee: Expression, depth: int = 0) -> TypeInfo | None:
        """The class that calling `callee` constructs, where it is plain to see:
        `Model`, `Buffer[int]` (a generic class given its parameters), `type(x)`,
        a classmethod's `cls`."""
        if isinstance(callee, IndexExpr):
            callee = callee.base
        if isinstance(callee, RefExpr) and isinstance(callee.node, TypeInfo):
            return callee.node
        if isinstance(callee, RefExpr) and callee.node in self.class_objects:
            return self.self_class[callee.node]
        if (
            isinstance(callee, CallExpr)
            and callee_fullname(callee.callee) == "builtins.type"
            and len(callee.args) == 1
        ):
            return self.instance_class(callee.args[0], depth + 1)
        return None

    def star_items(self, expr: Expression, depth: int = 0) -> list[Expression | Declaration] | None:
        """The effects in `*expr` (`effax.uses(*ROW)`): a tuple or list of them, written
        there or held in a variable (whose type says them, from another module)."""
        if depth > 20:
            return None
        if isinstance(expr, TupleExpr | ListExpr):
            return list(expr.items)
        if not isinstance(expr, RefExpr) or not isinstance(expr.node, Var):
            return None
        typ = get_proper_type(expr.node.type) if expr.node not in self.locals else None
        if isinstance(typ, TupleType):
            declarations = [declaration_of_type(item) for item in typ.items]
            if all(d is not None for d in declarations):
                return [d for d in declarations if d is not None]
        value = self.value_of(expr)
        return self.star_items(value, depth + 1) if value is not None else None

    def spread(self, call: CallExpr) -> list[Expression] | None:
        """The positional arguments of `call`, a `*args` of a tuple or list (written
        there or held in a variable) spread in place; None where one is unknown."""
        found: list[Expression] = []
        for arg, kind in zip(call.args, call.arg_kinds, strict=True):
            if kind == ARG_POS:
                found.append(arg)
            elif kind == ARG_STAR:
                items = self.star_items(arg)
                if items is None or any(isinstance(i, Declaration) for i in items):
                    return None
                found.extend(i for i in items if not isinstance(i, Declaration))
            elif kind != ARG_NAMED:
                return None
        return found

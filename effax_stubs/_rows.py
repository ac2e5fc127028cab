"""Rows: what a function body or module top level performs, handles and declares
(the walk itself, with the handlers around each call, is `_walker`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from mypy.nodes import (
    ARG_POS,
    ARG_STAR,
    CallExpr,
    ConditionalExpr,
    Decorator,
    Expression,
    FuncDef,
    FuncItem,
    IndexExpr,
    LambdaExpr,
    MemberExpr,
    MypyFile,
    OverloadedFuncDef,
    RefExpr,
    Statement,
    SuperExpr,
    TypeInfo,
    Var,
)
from mypy.types import Instance, get_proper_type

from ._handling import Handling
from ._marks import CODE, Declaration, members, row_of_type
from ._names import (
    OPERATIONS,
    PERFORMING,
    RETURNING,
    RNG,
    Row,
    callable_arguments,
    callee_fullname,
    callee_of,
    effax_name,
    effect_operations,
    foreign_callables,
    foreign_higher_order,
    function_argument,
    is_sampler,
    keyword,
    walked_in_place,
)
from ._report import describe
from ._source import body_performs, definition
from ._tree import has_body, is_uses, transparent
from ._walker import Walker

__all__ = ["Analysis", "decorated_with_row"]


class Analysis(Handling):
    """What one function body or module top level does with effects.

    Everything it resolves is a lower bound of what is performed and an upper bound
    of what is handled: where it cannot tell, it answers so that nothing is reported.
    """

    def __init__(
        self, modules: Mapping[str, MypyFile], root: FuncItem | None, body: list[Statement]
    ) -> None:
        super().__init__(modules, root, body)
        self._demands: dict[FuncItem, Row] = {}

    # -- rows

    def declared_row(self, call: CallExpr, *, complete: bool) -> Row | None:
        """The effects named by `effax.uses(...)`; with `complete`, None unless all are
        known (a row must be exact to check a body; a lower bound does for calls)."""
        found = set()
        for arg, kind in zip(call.args, call.arg_kinds, strict=True):
            items = self.star_items(arg) if kind == ARG_STAR else [arg] if kind == ARG_POS else []
            if items is None:
                if complete:
                    return None
                continue
            for item in items:
                declaration = item if isinstance(item, Declaration) else self.declaration(item)
                if declaration is not None:
                    found.add(declaration.fullname)
                elif complete:
                    return None
        return frozenset(found)

    def decorator_row(self, decorator: Decorator) -> Row | None:
        decorators = decorator.original_decorators or decorator.decorators
        if not decorators:  # loaded from mypy's cache: the type says it
            return row_of_type(decorator.var.type)
        row: Row | None = None
        known = True  # every decorator is effax's own or keeps the row
        for expr in reversed(decorators):
            if is_uses(expr):
                assert isinstance(expr, CallExpr)
                row = self.declared_row(expr, complete=False)
                known = True
            elif transparent(expr):
                continue
            elif row is not None:
                return None  # an unknown decorator around the row
            else:
                known = False
        if row is None and known and decorator.func in self.nested:
            return self.demand_of(decorator.func)
        return row

    def overload_row(self, overload: OverloadedFuncDef) -> Row | None:
        """An overloaded function's row: its implementation's."""
        if overload.is_property:
            return None
        if isinstance(overload.impl, Decorator):
            return self.decorator_row(overload.impl)
        return None

    def property_row(self, expr: MemberExpr, *, setter: bool = False) -> Row | None:
        """The row of the property `expr` reads (with `setter`: assigns), where it is
        one and has a row; an effect's operation written as a property performs the
        effect (`budget.left`)."""
        info = self.instance_class(expr.expr)
        symbol = info.get(expr.name) if info is not None else None
        node = symbol.node if symbol is not None else None
        if isinstance(node, OverloadedFuncDef) and node.items:  # a property with a setter
            if setter and len(node.items) < 2:
                return None
            node = node.items[1 if setter else 0]
        elif setter:
            return None  # an attribute, or a property without a setter
        if not isinstance(node, Decorator) or not (
            setter or node.var.is_property or node.var.is_settable_property
        ):
            return None
        assert info is not None
        if self.operation_property(expr):
            declaration = self.declaration(expr.expr)
            return frozenset({declaration.fullname}) if declaration is not None else None
        return self.decorator_row(node)

    def operation_property(self, expr: MemberExpr) -> bool:
        """Whether `expr` reads an effect's operation written as a property
        (`budget.left`): reported as an operation, not as a call."""
        info = self.instance_class(expr.expr)
        return info is not None and expr.name in effect_operations(info)

    def who(self, expr: MemberExpr) -> str | None:
        """Who performs what reading or assigning `expr` performs, for a report:
        None for an operation (`Effect "t" is performed`), else the property."""
        return None if self.operation_property(expr) else describe(expr)

    def member_row(self, info: TypeInfo, name: str) -> Row | None:
        symbol = info.get(name)
        if symbol is not None and isinstance(symbol.node, Decorator):
            return self.decorator_row(symbol.node)
        if symbol is not None and isinstance(symbol.node, OverloadedFuncDef):
            return self.overload_row(symbol.node)
        if symbol is not None and isinstance(symbol.node, Var) and name != "__call__":
            # an attribute: a function with a row, or an object with a `__call__` row
            # (a submodule, Equinox-style: `self.body(x)`)
            row = row_of_type(symbol.node.type)
            if row is not None:
                return row
            typ = get_proper_type(symbol.node.type)
            if isinstance(typ, Instance):
                return self.member_row(typ.type, "__call__")
        return None

    def row_of(self, expr: Expression, depth: int = 0) -> Row | None:
        """The effects that calling `expr` performs, where they are known, or None."""
        if depth > 20:
            return None
        if isinstance(expr, LambdaExpr):
            return self.demand_of(expr)
        constructed = self.constructed(expr) if isinstance(expr, IndexExpr | CallExpr) else None
        if constructed is not None:  # `Buffer[int](...)`, `type(self)(...)`: `__init__` runs
            return self.member_row(constructed, "__init__")
        if isinstance(expr, CallExpr):
            return self.row_of_result(expr, depth)
        if isinstance(expr, IndexExpr):  # `carry[0]`, an item of a tuple plain to see
            item = self.item(expr)
            return self.row_of(item, depth + 1) if item is not None else None
        if isinstance(expr, ConditionalExpr):  # `a if c else b`: what either may perform
            rows = [self.row_of(e, depth + 1) for e in (expr.if_expr, expr.else_expr)]
            known = [row for row in rows if row is not None]
            return frozenset().union(*known) if known else None
        if isinstance(expr, SuperExpr) and expr.info is not None:  # super().name
            for base in expr.info.mro[1:]:
                if expr.name in base.names:
                    return self.member_row(base, expr.name)
            return None
        if not isinstance(expr, RefExpr):
            return None
        node = expr.node
        if isinstance(node, Decorator):
            return self.decorator_row(node)
        if isinstance(node, TypeInfo):  # constructing: `__init__` runs
            return self.member_row(node, "__init__")
        if isinstance(node, FuncDef):
            return self.demand_of(node) if node in self.nested else None
        if isinstance(node, OverloadedFuncDef):
            return self.overload_row(node)
        if isinstance(node, Var):
            if node not in self.locals and not self.rebound(node):
                row = row_of_type(node.type)
                if row is not None:
                    return row
            value = self.value_of(expr)
            row = self.row_of(value, depth + 1) if value is not None else None
            if row is not None:
                return row
            if node in self.class_objects:  # `cls(...)` constructs, as `Model(...)` does
                return self.member_row(self.self_class[node], "__init__")
            info = self.instance_class(expr)
            return self.member_row(info, "__call__") if info is not None else None
        if isinstance(expr, MemberExpr):
            if expr.name in _STAGING and self.compiled(expr.expr):
                return self.row_of(expr.expr, depth + 1)  # tracing performs the row
            if isinstance(expr.expr, RefExpr) and isinstance(expr.expr.node, TypeInfo):
                return self.member_row(expr.expr.node, expr.name)
            info = self.instance_class(expr.expr)
            return self.member_row(info, expr.name) if info is not None else None
        return None

    def row_of_result(self, call: CallExpr, depth: int) -> Row | None:
        """The row of the function that `call` returns."""
        callee = call.callee
        name = effax_name(callee_fullname(callee))
        if name == "handle":
            positional = self.spread(call)
            if not positional:
                return None
            row = self.row_of(positional[0], depth + 1)
            # the handlers are installed in order, the last innermost: each one's
            # code (an interceptor's functions) runs under those before it
            outside: Row = frozenset()
            code: set[str] = set()
            for handler in positional[1:]:
                for layer in self.layers(handler):
                    code |= self.handler_code(layer) - outside
                    discharged = self.discharged(layer)
                    if row is None or discharged is None:
                        return None
                    row, outside = row - discharged, outside | discharged
            return None if row is None else row | code
        if name in RETURNING or foreign_higher_order(callee_fullname(callee)) == "returns":
            # effax's wrappers, and JAX's (`jax.grad(f)`: what `f` performs)
            function = function_argument(call)
            return self.row_of(function, depth + 1) if function is not None else None
        if isinstance(callee, CallExpr):
            if is_uses(callee):  # effax.uses(...)(f)
                return self.declared_row(callee, complete=False)
            if effax_name(callee_fullname(callee.callee)) in RETURNING:  # jit(**kw)(f)
                function = function_argument(call)
                return self.row_of(function, depth + 1) if function is not None else None
        elif callee_fullname(callee) == "functools.partial":
            function = function_argument(call)
            return self.row_of(function, depth + 1) if function is not None else None
        info = self.constructed(callee)  # `Model(...)(x)`, `cls(...)(x)`, `type(self)(...)(x)`
        return self.member_row(info, "__call__") if info is not None else None

    def compiled(self, expr: Expression) -> bool:
        """Whether `expr` is a compiled handled function (`effax.Compiled`)."""
        if isinstance(expr, CallExpr):
            callee = expr.callee.callee if isinstance(expr.callee, CallExpr) else expr.callee
            name = effax_name(callee_fullname(callee))
            return name == "jit" or (name == "handle" and keyword(expr, "transform") is not None)
        if isinstance(expr, RefExpr) and isinstance(expr.node, Decorator):  # @effax.jit
            decorated = get_proper_type(expr.node.var.type)
            info = decorated.type if isinstance(decorated, Instance) else None
        else:
            info = self.instance_class(expr)
        return info is not None and effax_name(info.fullname) == "Compiled"

    def demand_of(self, function: FuncItem) -> Row:
        """The effects a nested function or lambda performs and does not handle."""
        if function in self._demands:
            return self._demands[function]
        self._demands[function] = frozenset()  # while recursing
        missing: set[str] = set()
        Walker(self, lambda node, row, who: missing.update(row)).visit(function.body)
        self._demands[function] = frozenset(missing)
        return self._demands[function]

    # -- handlers

    def handler_code(self, expr: Expression) -> Row:
        """What the code of the handler `expr` performs: an interceptor's functions,
        which run where it is installed (under the handlers outside it), not where
        they are written nor under the performer's row."""
        found: set[str] = set()
        interceptor = self.interceptor(expr)
        if interceptor is None:  # made in another module: its type says
            return members(self.interceptor_marks(expr), CODE)
        subclass = self.interceptor_class(interceptor)
        if subclass is not None:
            # a subclass of `effax.Interceptor` of the user's, `Clipped(meter, ())`: its
            # methods named as the operations of the effect it is given answer them
            for method in self.operation_methods(subclass, self.operations_of(interceptor)):
                found |= self.code_row(method)
            return frozenset(found)
        for name, function in zip(interceptor.arg_names, interceptor.args, strict=True):
            if name is not None:
                found |= self.code_row(function)
        return frozenset(found)

    def code_row(self, function: Expression | Decorator | FuncDef) -> Row:
        """What calling `function` performs, for handler code: also a plain function
        or method of the user's (whose body is walked here: handler code has no row
        to declare)."""
        node = function.node if isinstance(function, RefExpr) else function
        if isinstance(node, Decorator):
            return self.decorator_row(node) or frozenset()
        if not isinstance(node, FuncDef):
            row = self.row_of(function) if isinstance(function, Expression) else None
            return row or frozenset()
        if node in self.nested:
            return self.demand_of(node)
        if node.is_property:
            return frozenset()
        if not has_body(node):  # a body mypy freed, or from its cache: read the source
            source = definition(self.modules, node)
            row = body_performs(*source) if source is not None else None
            return row or frozenset()
        return Analysis(self.modules, node, node.body.body).demand_of(node)

    def rng(self) -> str:
        """The full name of `effax.rng`'s declaration, wherever effax defines it
        (effects are named by their declaration, like any other in a row)."""
        module = self.modules.get("effax")
        symbol = module.names.get("rng") if module is not None else None
        node = symbol.node if symbol is not None else None
        return node.fullname if node is not None and node.fullname else RNG

    # -- what a call performs

    def performed(self, call: CallExpr) -> tuple[Row, str | None] | None:
        """The effects `call` performs, and who performs them (None: an operation)."""
        callee = call.callee
        if isinstance(callee, MemberExpr):
            declaration = self.declaration(callee.expr)
            if declaration is not None:
                info = self.instance_class(callee.expr)
                operations = (
                    effect_operations(info)  # effax's kinds' or a user effect's
                    if info is not None
                    else OPERATIONS.get(declaration.kind or "", frozenset())
                )
                if callee.name in operations:
                    return frozenset({declaration.fullname}), None
                return None
        fullname = callee_fullname(callee)
        if is_sampler(fullname):
            stream = keyword(call, "stream")
            if stream is None:
                return frozenset({self.rng()}), None
            declaration = self.declaration(stream)
            return (frozenset({declaration.fullname}), None) if declaration else None
        name = effax_name(fullname)
        if name is not None and name in PERFORMING:
            found: set[str] = set()
            in_place = walked_in_place(call)
            for function in callable_arguments(call, name):
                if not any(function is f for f in in_place):  # (walked where it is)
                    found |= self.row_of(function) or frozenset()
            return frozenset(found), f"effax.{name}"
        if fullname is None and isinstance(callee, MemberExpr):
            fullname = self.method_fullname(callee)  # `xs.sort(key=f)`
        if foreign_higher_order(fullname) == "calls":
            # `jax.lax.scan(step, ...)`, `map(f, xs)`, `sorted(xs, key=f)`: the functions
            # handed over are called now (a lambda there is walked as one)
            assert fullname is not None
            in_place = walked_in_place(call)
            for arg in foreign_callables(call, fullname):
                if not any(arg is f for f in in_place):
                    row = self.row_of(arg)
                    if row:
                        return row, describe(arg)
            return None
        if isinstance(callee, LambdaExpr):
            return None
        row = self.row_of(callee)
        return (row, describe(callee)) if row else None


# a compiled handled function's methods that trace it (under the handlers around them)
_STAGING: Final = frozenset({"trace", "lower"})


def decorated_with_row(node: object) -> bool:
    """Whether `node` is a definition decorated with a row (or with an effax wrapper
    of a function that has one)."""
    if not isinstance(node, Decorator):
        return False
    if row_of_type(node.var.type) is not None:
        return True
    decorators = node.original_decorators or node.decorators
    return any(
        is_uses(d) or effax_name(callee_fullname(callee_of(d) or d)) in RETURNING
        for d in decorators
    )

"""Handlers: what a handler expression handles, installs and forwards (interceptors),
and calls that keep the functions they are given for later. `_rows.Analysis` builds on
it."""

from __future__ import annotations

from collections.abc import Mapping

from mypy.nodes import (
    AssignmentExpr,
    CallExpr,
    ConditionalExpr,
    Decorator,
    DictExpr,
    Expression,
    FuncDef,
    FuncItem,
    ListExpr,
    MemberExpr,
    MypyFile,
    NameExpr,
    RefExpr,
    SetExpr,
    TypeInfo,
    Var,
)
from mypy.types import Instance, get_proper_type

from ._marks import FORWARDS, INTERCEPTS, Declaration, handles_of_type, marks_of, members
from ._names import (
    BUILTIN_CALLING,
    CONTAINERS,
    FOREIGN_PACKAGES,
    HANDLER_MAKERS,
    METADATA,
    STORING,
    Row,
    callee_fullname,
    effax_name,
    effect_operations,
    function_argument,
    is_handler_maker,
)
from ._scope import Scope
from ._source import definition, reads_first
from ._tree import calls_outer, descendants, foreign_class, has_body

__all__ = ["Handling", "forwards", "is_interceptor_class"]


class Handling(Scope):
    """What the handler expressions of one function body or module top level handle.

    Where it cannot tell, it answers so that nothing is reported: an upper bound of
    what is handled.
    """

    def discharged(self, expr: Expression, depth: int = 0) -> Row | None:
        """The effect a handler expression handles, or None where it is not known."""
        if depth > 20:
            return None
        interceptor = self.interceptor(expr)
        if interceptor is not None:
            # it forwards to the handler outside it, so it handles its effect only
            # where it answers an operation with a function that never calls `outer`
            declaration = self.intercepted(interceptor)
            alone = declaration is not None and self.answers_alone(interceptor)
            return frozenset({declaration.fullname}) if alone and declaration else frozenset()
        if isinstance(expr, CallExpr) and isinstance(expr.callee, MemberExpr):
            name, receiver = expr.callee.name, expr.callee.expr
            info = self.instance_class(receiver)
            if is_handler_maker(info, name) if info is not None else name in HANDLER_MAKERS:
                declaration = self.declaration(receiver)
                return frozenset({declaration.fullname}) if declaration is not None else None
        if isinstance(expr, RefExpr) and isinstance(expr.node, Var):
            if expr.node not in self.locals and not self.rebound(expr.node):
                handles = handles_of_type(expr.node.type)
                if handles is not None:
                    return handles
            value = self.value_of(expr)
            if value is not None:
                return self.discharged(value, depth + 1)
            if self.intercepts(expr):
                return frozenset()  # an interceptor made where we cannot see
        return None

    def intercepts(self, expr: Expression) -> bool:
        """Whether `expr` holds an `effax.Interceptor` (by its type; a subclass too)."""
        info = self.instance_class(expr)
        return info is not None and is_interceptor_class(info)

    def interceptor(self, expr: Expression, depth: int = 0) -> CallExpr | None:
        """The call making the interceptor `expr` evaluates to, where plain to see:
        `effax.intercept(...)`, or constructing an `effax.Interceptor` subclass."""
        if depth > 20:
            return None
        if isinstance(expr, CallExpr):
            if effax_name(callee_fullname(expr.callee)) == "intercept":
                return expr
            return expr if self.interceptor_class(expr) is not None else None
        value = self.value_of(expr)
        return self.interceptor(value, depth + 1) if value is not None else None

    def interceptor_class(self, call: CallExpr) -> TypeInfo | None:
        """The user's `effax.Interceptor` subclass that `call` constructs, if it does."""
        info = self.constructed(call.callee)
        return info if info is not None and is_interceptor_class(info) else None

    def operation_methods(self, info: TypeInfo, operations: Row) -> list[Decorator | FuncDef]:
        """The methods of the user's interceptor class `info` named as `operations`."""
        found: list[Decorator | FuncDef] = []
        for name in sorted(operations):
            symbol = info.get(name)
            node = symbol.node if symbol is not None else None
            if isinstance(node, Decorator | FuncDef) and not node.fullname.startswith("effax."):
                found.append(node)
        return found

    def intercepted(self, call: CallExpr) -> Declaration | None:
        """The effect an `effax.intercept(effect, ...)` call intercepts."""
        effect = function_argument(call) if call.args else None
        return self.declaration(effect) if effect is not None else None

    def answers_alone(self, call: CallExpr) -> bool:
        """Whether the interceptor `call` makes answers an operation of its effect with
        a function that never calls `outer` (its first parameter). Then it may handle
        what is performed under it by itself, as run time does (no handler outside
        needed): rows name effects, not operations, so one that answers some of them
        and forwards others counts as handling its effect (an upper bound)."""
        operations = self.operations_of(call)
        subclass = self.interceptor_class(call)
        if subclass is not None:  # its methods, which forward with `self.outer()`
            return any(not forwards(subclass, op) for op in operations)
        given = {name: arg for name, arg in zip(call.arg_names, call.args, strict=True) if name}
        return any(
            name in given and _ignores_outer(given[name], self.modules) for name in operations
        )

    def operations_of(self, call: CallExpr) -> Row:
        """The operations of the effect an interceptor-making `call` is given."""
        effect = function_argument(call)
        info = self.instance_class(effect) if effect is not None else None
        return effect_operations(info) if info is not None else frozenset()

    def intercepted_by(self, expr: Expression) -> Row:
        """The effect the interceptor `expr` intercepts (none where it is not one)."""
        interceptor = self.interceptor(expr)
        if interceptor is None:  # made in another module: its type says
            return members(self.interceptor_marks(expr), INTERCEPTS)
        declaration = self.intercepted(interceptor)
        return frozenset({declaration.fullname}) if declaration is not None else frozenset()

    def forwarded(self, expr: Expression) -> Row:
        """The effect an interceptor `expr` forwards to the handler outside it."""
        interceptor = self.interceptor(expr)
        if interceptor is None:  # made in another module: its type says
            marks = self.interceptor_marks(expr)
            return members(marks, INTERCEPTS) if FORWARDS in marks else frozenset()
        if self.answers_alone(interceptor):
            return frozenset()
        declaration = self.intercepted(interceptor)
        return frozenset({declaration.fullname}) if declaration is not None else frozenset()

    def interceptor_marks(self, expr: Expression) -> frozenset[str]:
        """The marks of the interceptor a module-level variable holds, made in a module
        whose tree mypy freed (`effax.intercept`'s hook marks its type)."""
        var = expr.node if isinstance(expr, RefExpr) else None
        if isinstance(var, Var) and var not in self.locals and not self.rebound(var):
            return marks_of(var.type)
        return frozenset()

    def layers(self, expr: Expression, depth: int = 0) -> list[Expression]:
        """The handlers a handler expression installs, outermost first: those of an
        `effax.handlers(...)` bundle (written there or held in a variable)."""
        if depth > 20:
            return [expr]
        if isinstance(expr, AssignmentExpr):
            return self.layers(expr.value, depth + 1)
        if isinstance(expr, CallExpr) and effax_name(callee_fullname(expr.callee)) == "handlers":
            spread = self.spread(expr)
            if spread is None:
                return [expr]
            return [layer for arg in spread for layer in self.layers(arg, depth + 1)]
        value = self.value_of(expr) if isinstance(expr, RefExpr) else None
        if isinstance(value, CallExpr) and effax_name(callee_fullname(value.callee)) == "handlers":
            return self.layers(value, depth + 1)
        return [expr]

    def stores(self, callee: Expression) -> bool:
        """Whether calling `callee` stores the functions it is given for later instead
        of calling them (`callbacks.append(f)`, `registry.setdefault(k, f)`)."""
        fullname = callee_fullname(callee)
        if fullname in STORING:
            return True
        if not isinstance(callee, MemberExpr) or self.method_fullname(callee) in BUILTIN_CALLING:
            return False
        info = self.instance_class(callee.expr)
        receiver = callee.expr
        if info is None and isinstance(receiver, MemberExpr):  # `self.callbacks.append`
            owner = self.instance_class(receiver.expr)
            symbol = owner.get(receiver.name) if owner is not None else None
            typ = get_proper_type(symbol.type) if symbol is not None else None
            info = typ.type if isinstance(typ, Instance) else None
        if info is not None:
            return any(base.fullname in CONTAINERS for base in info.mro)
        value = self.value_of(receiver)
        return isinstance(value, ListExpr | DictExpr | SetExpr)

    def installed(self, expr: Expression, depth: int = 0) -> Row | None:
        """What a `with` item handles: a set of effects, or None for 'maybe anything'."""
        if depth > 20:
            return None
        discharged = self.discharged(expr)
        if discharged is not None:
            return discharged
        if isinstance(expr, AssignmentExpr):  # `with (h := x.provide(1)):`
            return self.installed(expr.value, depth + 1)
        if isinstance(expr, ConditionalExpr):  # what either installs handles for sure
            rows = [self.installed(e, depth + 1) for e in (expr.if_expr, expr.else_expr)]
            first, second = rows
            return None if first is None or second is None else first & second
        if isinstance(expr, CallExpr):
            if effax_name(callee_fullname(expr.callee)) == "handlers":
                spread = self.spread(expr)
                if spread is None:
                    return None
                found: set[str] = set()
                for arg in spread:
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
        return frozenset() if info is not None and foreign_class(info) else None

    def foreign(self, callee: Expression) -> bool:
        """Whether calling `callee` makes a context manager that installs no handler."""
        if isinstance(callee, RefExpr) and isinstance(callee.node, TypeInfo):
            return foreign_class(callee.node)
        fullname = callee_fullname(callee)
        if fullname:
            return fullname.partition(".")[0] in FOREIGN_PACKAGES
        if isinstance(callee, MemberExpr):
            info = self.instance_class(callee.expr)
            return info is not None and foreign_class(info)
        return False


def is_interceptor_class(info: TypeInfo) -> bool:
    """Whether `info` is `effax.Interceptor` or a subclass of it."""
    return any(effax_name(base.fullname) == "Interceptor" for base in info.mro)


def forwards(info: TypeInfo, operation: str) -> bool:
    """Whether the user's interceptor class `info` forwards `operation` to the handler
    outside it: it defines no method of that name, or that method calls `outer`
    (read from the class's metadata, recorded where mypy analysed it)."""
    for base in info.mro:
        if base.fullname.startswith("effax."):
            return True
        recorded = base.metadata.get(METADATA, {}).get("forwards")
        if isinstance(recorded, dict) and operation in recorded:
            return bool(recorded[operation])
        symbol = base.names.get(operation)
        node = symbol.node if symbol is not None else None
        if isinstance(node, Decorator):
            node = node.func
        if isinstance(node, FuncDef):
            return calls_outer(node)
    return True


def _ignores_outer(function: Expression, modules: Mapping[str, MypyFile]) -> bool:
    """Whether `function` (a lambda or a def written in the user's code) never reads
    its first parameter, the handler an interceptor forwards to."""
    written: object = function.node if isinstance(function, RefExpr) else function
    if isinstance(written, Decorator):
        written = written.func
    if isinstance(written, FuncDef) and not has_body(written):
        # a body mypy freed, or a definition from its cache: read from its source
        source = definition(modules, written)
        return source is not None and not reads_first(source[0])
    if not isinstance(written, FuncItem) or not written.arguments:
        return False
    outer = written.arguments[0].variable
    return not any(isinstance(n, NameExpr) and n.node is outer for n in descendants(written.body))

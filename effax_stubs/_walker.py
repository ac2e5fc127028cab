"""The walker: statements in order, with the handlers that enclosing `with`s install
around each call."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from mypy.nodes import (
    AssignmentExpr,
    AssignmentStmt,
    Block,
    CallExpr,
    ClassDef,
    Decorator,
    Expression,
    ForStmt,
    FuncDef,
    FuncItem,
    IfStmt,
    IndexExpr,
    LambdaExpr,
    ListExpr,
    MatchStmt,
    MemberExpr,
    NameExpr,
    Node,
    OperatorAssignmentStmt,
    OverloadedFuncDef,
    RefExpr,
    StarExpr,
    SymbolNode,
    TryStmt,
    TupleExpr,
    TypeInfo,
    WhileStmt,
    WithStmt,
)

from ._names import (
    FOREIGN_PACKAGES,
    RETURNING,
    Row,
    callee_fullname,
    effax_name,
    foreign_higher_order,
    function_argument,
    lambda_arguments,
    positional_args,
    walked_in_place,
)
from ._report import Sink, describe
from ._scope import FORWARDED, trigger, triggered, triggered_effect
from ._tree import children_of, descendants, is_uses, unpacked

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._rows import Analysis

__all__ = ["Walker", "hooked"]


class Walker:
    """Walks statements, tracking the handlers that enclosing `with`s install, and
    passes what each call performs and no handler covers to `sink`."""

    def __init__(
        self,
        analysis: Analysis,
        sink: Sink,
        *,
        around: dict[int, Row | None] | None = None,
        later: Callable[[CallExpr], None] | None = None,
    ) -> None:
        self.analysis = analysis
        self.sink = sink
        # with `around`: record the handlers around each call (by id) instead of
        # checking it (the module-level check then checks each call from its hook)
        self.around = around
        self.handled: Row | None = frozenset()  # None: anything may be handled
        self.exit_stacks: set[SymbolNode | None] = set()  # `with ExitStack() as <these>`
        self.setters: set[int] = set()  # properties assigned (ids in `around`)
        # the value each local holds here, as the walk binds them in order (None: not
        # one known value); the names read are recorded in `analysis.bound_at`
        self.current: dict[SymbolNode, Expression | None] = {}
        self.anchor: Node | None = None  # the `with` statement being walked
        self.enclosing: list[CallExpr] = []  # the calls whose arguments are being walked
        self.later = later  # (with `around`) where calls without a hook go

    def visit(self, node: Node) -> None:
        if isinstance(node, _BRANCHING):
            # code that may run or not, or many times: a local bound in it holds no
            # one known value after it (in a loop, nor before it)
            assigned = _assigned_in(node)
            if isinstance(node, ForStmt | WhileStmt):
                self.forget(assigned)
            self.visit_statement(node)
            self.forget(assigned)
        else:
            self.visit_statement(node)

    def forget(self, assigned: set[SymbolNode]) -> None:
        for var in assigned:
            values = self.analysis.locals.get(var, ())
            if len(values) == 1 and var not in self.current:
                continue  # bound only there: its one value, as without a walk
            self.current[var] = None

    def bind(self, lvalue: Expression, value: Expression | None) -> None:
        for target, item in unpacked(lvalue, value):
            if isinstance(target, NameExpr) and target.node is not None:
                self.current[target.node] = item

    def visit_defaults(self, function: FuncItem) -> None:
        """Default values run where the `def` (or `lambda`) runs, not where it is called."""
        for argument in function.arguments:
            if argument.initializer is not None:
                self.visit(argument.initializer)

    def visit_statement(self, node: Node) -> None:
        if isinstance(node, Block):
            if not node.is_unreachable:
                for statement in node.body:
                    self.visit(statement)
        elif isinstance(node, FuncDef):
            self.visit_defaults(node)  # the body counts where it is called
        elif isinstance(node, OverloadedFuncDef):
            for item in [*node.items, *([node.impl] if node.impl else [])]:
                self.visit(item)
        elif isinstance(node, ClassDef):
            self.visit(node.defs)  # a class body runs where the class is defined
        elif isinstance(node, Decorator):
            for expr in node.decorators:
                self.visit(expr)
            self.visit_defaults(node.func)
        elif isinstance(node, LambdaExpr):
            self.visit_defaults(node)  # the body counts where it is called or passed
        elif isinstance(node, NameExpr):
            if node.node in self.current:
                self.analysis.bound_at[id(node)] = self.current[node.node]
        elif isinstance(node, AssignmentExpr):
            self.visit(node.value)
            self.bind(node.target, node.value)
        elif isinstance(node, WithStmt):
            self.visit_with(node)
        elif isinstance(node, TryStmt) and self.catches_missing(node):
            # the optional-effect pattern: what the body performs unhandled is caught
            outer, self.handled = self.handled, None
            self.visit(node.body)
            self.handled = outer
            for block in (*node.handlers, node.else_body, node.finally_body):
                if block is not None:
                    self.visit(block)
        elif isinstance(node, CallExpr):
            self.visit_call(node)
        elif isinstance(node, MemberExpr):
            self.visit(node.expr)
            self.visit_property(node, setter=False)  # reading a property runs its getter
        elif isinstance(node, AssignmentStmt | OperatorAssignmentStmt):
            self.visit(node.rvalue)
            lvalues = node.lvalues if isinstance(node, AssignmentStmt) else [node.lvalue]
            update = isinstance(node, OperatorAssignmentStmt)
            for target in lvalues:
                self.visit_target(target, update=update)
                self.bind(target, None if update else node.rvalue)
        elif isinstance(node, ForStmt):
            self.visit(node.expr)
            self.bind(node.index, None)
            self.visit(node.index)
            self.visit(node.body)
            if node.else_body is not None:
                self.visit(node.else_body)
        else:
            for child in children_of(node):
                self.visit(child)

    def visit_target(self, target: Expression, *, update: bool) -> None:
        """An assignment's target: assigning a property runs its setter (and `+=`
        its getter first)."""
        if isinstance(target, TupleExpr | ListExpr | StarExpr):
            for item in target.items if not isinstance(target, StarExpr) else [target.expr]:
                self.visit_target(item, update=update)
        elif isinstance(target, MemberExpr):
            self.visit(target.expr)
            if update:
                self.visit_property(target, setter=False)
            self.visit_property(target, setter=True)
        else:
            self.visit(target)

    def visit_property(self, node: MemberExpr, *, setter: bool) -> None:
        row = self.analysis.property_row(node, setter=setter)
        if not row:
            return
        if self.around is not None:  # checked from the attribute hook
            self.around[id(node)] = self.handled
            if setter:
                self.setters.add(id(node))
        elif self.handled is not None:
            missing = row - self.handled
            if missing:
                self.sink(node, missing, self.analysis.who(node))

    def catches_missing(self, node: TryStmt) -> bool:
        """Whether `node`'s handlers catch what performing an effect with no handler
        raises here: `UnhandledEffectError` at module level; in a function with a
        row, `UndeclaredEffectError` (a handler outside the row is hidden)."""
        return any(typ is None or self.catches(typ) for typ in node.types)  # None: `except:`

    def catches(self, typ: Expression) -> bool:
        caught = _CAUGHT_UNHANDLED if self.around is not None else _CAUGHT_UNDECLARED
        for item in typ.items if isinstance(typ, TupleExpr) else [typ]:
            fullname = callee_fullname(item)
            if fullname in caught or effax_name(fullname) in caught:
                return True
        return False

    def visit_with(self, node: WithStmt) -> None:
        # `with a, b:` is `with a: with b:`: each item is evaluated under the ones before
        outer, anchor = self.handled, self.anchor
        self.anchor = node
        for expr, target in zip(node.expr, node.target, strict=True):
            self.visit(expr)
            if target is not None:
                self.bind(target, expr)
            if (
                isinstance(target, RefExpr)
                and isinstance(expr, CallExpr)
                and callee_fullname(expr.callee) in _EXIT_STACKS
            ):
                self.exit_stacks.add(target.node)
            if (
                isinstance(expr, CallExpr)
                and callee_fullname(expr.callee) == "contextlib.suppress"
                and any(self.catches(typ) for typ in expr.args)
            ):
                self.handled = None  # the optional-effect pattern, as `try`/`except`
            for layer in self.analysis.layers(expr):
                self.install(layer)
        self.visit(node.body)
        self.handled, self.anchor = outer, anchor

    def install(self, layer: Expression) -> None:
        """Install the handler `layer` (one of a `with` item's): its code (an
        interceptor's functions) runs under the handlers outside it."""
        if self.handled is None:
            return
        # what its code performs and nothing outside handles: reported where an
        # operation it intercepts is performed under it (where run time raises)
        code = self.analysis.handler_code(layer) - self.handled
        intercepted = self.analysis.intercepted_by(layer) if code else frozenset()
        triggers = {trigger(e, m, describe(layer)) for e in intercepted for m in code}
        row = self.analysis.installed(layer)
        if row is None:
            self.handled = None
            return
        forwarded = self.analysis.forwarded(layer) - self.handled
        kept = {mark for mark in self.handled if triggered_effect(mark) not in row}
        self.handled = frozenset(kept) | row | triggers | {FORWARDED + e for e in forwarded}

    def visit_call(self, node: CallExpr) -> None:
        # what the lambdas it is given or calls will be called with: control flow's
        # operands, the arguments of `effax.nnx.remat(lambda m, x: m(x))(block, x)`
        for given, values in lambda_arguments(node):
            self.analysis.bind_arguments(given, values)
        transformed = function_argument(node.callee) if isinstance(node.callee, CallExpr) else None
        if isinstance(transformed, LambdaExpr):
            self.analysis.bind_arguments(transformed, list(positional_args(node)))
        name = effax_name(callee_fullname(node.callee))
        skip: Expression | None = None
        declaring = isinstance(node.callee, CallExpr) and is_uses(node.callee)  # uses(...)(f)
        returns = foreign_higher_order(callee_fullname(node.callee)) == "returns"  # jax.grad
        if name == "handle" or name in RETURNING or declaring or returns:
            function = function_argument(node)
            if isinstance(function, LambdaExpr):
                skip = function  # performed where the returned function is called
        # A lambda handed to a function of the user's own counts where that function
        # calls it (which may be under its own handler, or later): not here. Handed
        # to anything else (an effax operation, JAX, a builtin) it counts here.
        # Stored for later (`callbacks.append(f)`), it counts where it is called.
        user_function = _user_function(node.callee) or self.analysis.stores(node.callee)
        # An interceptor's functions are handler code: they run where the interceptor
        # is installed, under the handlers outside it (see `install`).
        handler_code = name == "intercept"
        self.enclosing.append(node)
        in_place = walked_in_place(node)
        for child in [node.callee, *node.args]:
            # (a list of branches, `effax.switch(i, [lambda ...], ...)`: each counts so)
            items = child.items if isinstance(child, ListExpr | TupleExpr) else [child]
            if not any(item is f for item in items for f in in_place):
                items = [child]
            for item in items:
                if isinstance(item, LambdaExpr):
                    self.visit_defaults(item)
                    if item is not skip and not user_function and not handler_code:
                        self.visit(item.body)  # a lambda counts where it is handed over
                else:
                    self.visit(item)
        self.enclosing.pop()
        # (a parameter bound to what it is called with has no hook: checked here)
        parameter = isinstance(node.callee, RefExpr) and node.callee.node in self.analysis.arguments
        if self.around is not None and hooked(node) and not parameter:
            self.around[id(node)] = self.handled  # checked from its own hook
            performed = None
        elif self.around is not None and not parameter:
            # no hook of its own (`effax.vmap(model)(x)`): checked from the hooks of
            # the calls inside it, once mypy has inferred what it reads
            self.around[id(node)] = self.handled
            if self.later is not None:
                self.later(node)
            performed = None
        else:
            performed = self.analysis.performed(node)
        if performed is not None and self.handled is not None:
            row, who = performed
            missing = row - self.handled
            if missing:
                self.sink(node, missing, who)
            for missing, who in triggered(row, self.handled):
                self.sink(node, missing, who)
        callee = node.callee
        if isinstance(callee, MemberExpr) and callee.name in (
            "enter_context",
            "enter_async_context",
            "__enter__",
        ):
            self.handled = None  # handlers installed by hand, for the rest of the block
        elif any(isinstance(a, RefExpr) and a.node in self.exit_stacks for a in node.args):
            self.handled = None  # an ExitStack handed to a helper, which may enter handlers


_EXIT_STACKS: Final = frozenset({"contextlib.ExitStack", "contextlib.AsyncExitStack"})
_CAUGHT_BY_BASES: Final = frozenset(
    {"EffectError", "builtins.LookupError", "builtins.Exception", "builtins.BaseException"}
)
_CAUGHT_UNHANDLED: Final = _CAUGHT_BY_BASES | {"UnhandledEffectError"}
_CAUGHT_UNDECLARED: Final = _CAUGHT_BY_BASES | {"UndeclaredEffectError"}


_BRANCHING: Final = (IfStmt, ForStmt, WhileStmt, TryStmt, MatchStmt)


def _assigned_in(node: Node) -> set[SymbolNode]:
    """The names a statement binds anywhere inside it (those bound in a nested
    definition are its own locals, never the walked body's: harmless here)."""
    found: set[SymbolNode] = set()
    targets: list[Expression] = []
    for child in descendants(node):
        if isinstance(child, AssignmentStmt):
            targets.extend(child.lvalues)
        elif isinstance(child, OperatorAssignmentStmt):
            targets.append(child.lvalue)
        elif isinstance(child, ForStmt):
            targets.append(child.index)
        elif isinstance(child, WithStmt):
            targets.extend(t for t in child.target if t is not None)
        elif isinstance(child, AssignmentExpr):
            targets.append(child.target)
    for target in targets:
        for name, _ in unpacked(target, None):
            if isinstance(name, NameExpr) and name.node is not None:
                found.add(name.node)
    return found


def hooked(call: CallExpr) -> bool:
    """Whether mypy can call a plugin hook for `call`: its callee has a name. Others
    (`effax.jit(f)(x)`, `(f if c else g)(x)`) are checked where they are walked."""
    callee = call.callee
    if isinstance(callee, IndexExpr):  # `Buffer[int](...)`: the class's hook
        return isinstance(callee.base, RefExpr) and isinstance(callee.base.node, TypeInfo)
    return isinstance(callee, RefExpr | LambdaExpr)


def _user_function(callee: Expression) -> bool:
    """Whether `callee` names a function defined in the user's code (not effax's, not
    a library's that `FOREIGN_PACKAGES` lists)."""
    if not isinstance(callee, RefExpr):
        return False
    node = callee.node
    if not isinstance(node, FuncDef | Decorator | OverloadedFuncDef):
        return False
    package = node.fullname.partition(".")[0]
    return package != "effax" and package not in FOREIGN_PACKAGES

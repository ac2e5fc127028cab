"""Call checks (rules 1 and 2): effects performed outside the row and not handled."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple

from mypy.nodes import (
    CallExpr,
    Context,
    Decorator,
    Expression,
    FuncItem,
    IndexExpr,
    MemberExpr,
    MypyFile,
    Node,
    TypeInfo,
)
from mypy.plugin import CheckerPluginInterface

from ._names import Row
from ._report import UNDECLARED, UNHANDLED, short, subject
from ._rows import Analysis
from ._scope import triggered
from ._tree import descendants, index_of, is_uses
from ._walker import Walker, hooked

__all__ = [
    "calls_in",
    "check_function",
    "check_module",
    "find_decorator",
    "report_pending",
    "report_unhandled",
    "scope_stack",
]


def scope_stack(api: CheckerPluginInterface) -> list[object]:
    scope = getattr(api, "scope", None)
    stack = getattr(scope, "stack", None)
    return list(stack) if isinstance(stack, list) else []


def find_decorator(scope: object, call: Context) -> Decorator | None:
    """The decorated definition in `scope`, one of whose decorators is `call`."""
    if isinstance(scope, MypyFile):
        statements = scope.defs
    elif isinstance(scope, TypeInfo):
        statements = scope.defn.defs.body
    elif isinstance(scope, FuncItem):
        statements = scope.body.body
    else:
        return None
    # (the index holds the decorators: an object with one's id is that decorator)
    return index_of(statements).decorated.get(id(call))


def check_function(
    api: CheckerPluginInterface, call: Context, modules: Mapping[str, MypyFile]
) -> None:
    """Rules 1 and 2 inside a function with a row: what its body performs that is
    neither in the row nor handled there is reported (`UNDECLARED`)."""
    stack = scope_stack(api)
    decorator = find_decorator(stack[-1], call) if stack else None
    if decorator is None:
        return
    # Several rows on one function: the innermost one governs the body.
    decorators = decorator.original_decorators or decorator.decorators
    if next((d for d in reversed(decorators) if is_uses(d)), None) is not call:
        return
    assert isinstance(call, CallExpr)
    function = decorator.func
    analysis = Analysis(modules, function, function.body.body)
    row = analysis.declared_row(call, complete=True)
    if row is None:
        return  # a row we cannot read: no guessing
    owner = f"{function.info.name}.{function.name}" if function.info else function.name
    where = f'the effect row of "{owner}" (effax.uses({", ".join(sorted(map(short, row)))}))'

    def report(node: Context, missing: Row, who: str | None) -> None:
        missing = missing - row
        if not missing:
            return
        message = (
            f"{subject(missing, who, passive='', active=',')} neither in {where} nor "
            'handled by an enclosing "with"'
        )
        api.fail(message, node, code=UNDECLARED)

    Walker(analysis, report).visit(function.body)


class _Walked(NamedTuple):
    """What one walk of a module's top level found."""

    module: MypyFile  # kept to tell a new tree of the same name
    analysis: Analysis
    around: dict[int, Row | None]  # the handlers around each call with a hook, by id
    # calls no hook sees (`effax.jit(f)(x)`), with what they leave unhandled, reported
    # from the hook of each call inside them: by id of that call
    pending: dict[int, list[tuple[Expression, Row, str | None]]]
    # calls no hook sees, checked from the hook of each call inside them: by its id
    later: dict[int, list[CallExpr]]
    setters: set[int]  # properties assigned, among `around` (their setter runs)


_WALKED: dict[str, _Walked] = {}


def check_module(
    api: CheckerPluginInterface, modules: Mapping[str, MypyFile], call: Context
) -> None:
    """Rules 1 and 2 at module level: what `call` performs with no handler around it
    is reported (`UNHANDLED`), but for `Ask`s declared with a default (which answer
    where no handler is installed); `call` may also be a property read. Each call is
    checked once, from its own hook, against the handlers around it, found in one
    walk per module: linear in the module's length. A call no hook sees (`effax.jit(f)(x)`) is
    checked by the walk and reported from the hooks of the calls inside it. Class
    bodies run at module level too."""
    stack = scope_stack(api)
    if not stack or not isinstance(stack[0], MypyFile):
        return
    if not isinstance(call, CallExpr | MemberExpr):
        return
    module = stack[0]
    walked = _WALKED.get(module.fullname)
    if walked is None or walked.module is not module:
        walked = _WALKED[module.fullname] = _walk(modules, module)
    for node, missing, who in walked.pending.get(id(call), ()):
        report_unhandled(api, node, missing, who)
    for later in walked.later.get(id(call), ()):  # a call inside one with no hook
        _check_call(api, walked, later)
    if id(call) not in walked.around:
        # not reached by the walk: in a function's body (a default value of one is
        # reached: it runs where the `def` does), or a lambda counted where it is called
        return
    _check_call(api, walked, call)


def _check_call(api: CheckerPluginInterface, walked: _Walked, call: CallExpr | MemberExpr) -> None:
    """Report what `call` performs that the handlers the walk found around it leave
    unhandled (checked when mypy has inferred what it reads, not when it is walked)."""
    handled = walked.around[id(call)]
    performed: tuple[Row, str | None] | None
    if isinstance(call, MemberExpr):
        row = walked.analysis.property_row(call, setter=id(call) in walked.setters)
        performed = (row, walked.analysis.who(call)) if row else None
    else:
        performed = walked.analysis.performed(call)
    if performed is None or handled is None:
        return
    row, who = performed
    # an Ask with a default needs no handler: `ask()` answers the default
    unanswered = walked.analysis.unanswered
    report_unhandled(api, call, unanswered(row - handled, handled), who)
    for missing, code in triggered(row, handled):  # interceptors' code this triggers
        report_unhandled(api, call, unanswered(missing, handled), code)


def _walk(modules: Mapping[str, MypyFile], module: MypyFile) -> _Walked:
    analysis = Analysis(modules, None, module.defs)
    pending: dict[int, list[tuple[Expression, Row, str | None]]] = {}

    def defer(node: Context, missing: Row, who: str | None) -> None:
        # a call without a hook: report it from the hooks of the calls inside it, of
        # those in its `with` statement and of those it is an argument of (not now:
        # the walk may run while mypy discards errors, in a trial inference)
        assert isinstance(node, Expression)
        missing = analysis.unanswered(missing, walker.handled or frozenset())
        anchor = calls_in(walker.anchor) if walker.anchor else ()
        inner = [*calls_in(node), *anchor, *walker.enclosing]
        for call in inner:  # (mypy reports the same error on a line once)
            pending.setdefault(id(call), []).append((node, missing, who))

    later: dict[int, list[CallExpr]] = {}

    def check_later(node: CallExpr) -> None:
        # a call without a hook (`effax.vmap(model)(x)`), checked from the hooks of the
        # calls inside it and around it, as `defer` reports
        anchor = calls_in(walker.anchor) if walker.anchor else ()
        for call in [*calls_in(node), *anchor, *walker.enclosing]:
            later.setdefault(id(call), []).append(node)

    around: dict[int, Row | None] = {}
    walker = Walker(analysis, defer, around=around, later=check_later)
    for statement in module.defs:
        walker.visit(statement)
    return _Walked(module, analysis, around, pending, later, walker.setters)


def calls_in(node: Node) -> Iterator[CallExpr | IndexExpr]:
    """The calls in `node` (itself included) that mypy calls a hook for; and its
    subscripts (`readers[0]`: the hook of a list's, tuple's or dict's `__getitem__`)."""
    for n in (node, *descendants(node)):
        if (isinstance(n, CallExpr) and hooked(n)) or isinstance(n, IndexExpr):
            yield n


def report_pending(api: CheckerPluginInterface, subscript: Context) -> None:
    """Report what a walk of this module left pending on `subscript` (a module's walk
    is never started from here: most subscripts have nothing to do with effax)."""
    stack = scope_stack(api)
    walked = _WALKED.get(stack[0].fullname) if stack and isinstance(stack[0], MypyFile) else None
    if walked is not None and walked.module is stack[0]:
        for node, missing, who in walked.pending.get(id(subscript), ()):
            report_unhandled(api, node, missing, who)
        for later in walked.later.get(id(subscript), ()):
            _check_call(api, walked, later)


def report_unhandled(
    api: CheckerPluginInterface, node: Context, missing: Row, who: str | None
) -> None:
    if missing:
        message = (
            f"{subject(missing, who, passive=' performed', active='')} at module level, "
            'where no enclosing "with" handles it'
        )
        api.fail(message, node, code=UNHANDLED)

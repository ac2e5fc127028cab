"""Call checks (rules 1 and 2): effects performed outside the row and not handled."""

from __future__ import annotations

from collections.abc import Mapping

from mypy.nodes import (
    CallExpr,
    Context,
    Decorator,
    FuncItem,
    LambdaExpr,
    MypyFile,
    TypeInfo,
)
from mypy.plugin import CheckerPluginInterface

from ._names import Row
from ._report import UNDECLARED, UNHANDLED, short, subject
from ._rows import Analysis, Walker
from ._tree import is_uses, top_level

__all__ = ["check_function", "check_module", "find_decorator", "scope_stack"]


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
    for statement in top_level(statements):
        if isinstance(statement, Decorator):
            decorators = statement.original_decorators or statement.decorators
            if any(d is call for d in decorators):
                return statement
    return None


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


# Per module: the handlers around each module-level call, from one walk of the
# module (the module object is kept to tell a new tree of the same name).
_AROUND: dict[str, tuple[MypyFile, Analysis, dict[int, Row | None]]] = {}


def check_module(
    api: CheckerPluginInterface, modules: Mapping[str, MypyFile], call: Context
) -> None:
    """Rules 1 and 2 at module level: what `call` performs with no handler around it
    is reported (`UNHANDLED`). Each call is checked once, from its own hook, against
    the handlers around it, found in one walk per module: linear in the module's
    length."""
    stack = scope_stack(api)
    if not stack or not isinstance(stack[0], MypyFile):
        return
    if not all(isinstance(scope, LambdaExpr) for scope in stack[1:]):
        return  # inside a function: its row, if any, is checked from `effax.uses`
    if not isinstance(call, CallExpr):
        return
    module = stack[0]
    cached = _AROUND.get(module.fullname)
    if cached is None or cached[0] is not module:
        analysis = Analysis(modules, None, module.defs)
        around: dict[int, Row | None] = {}
        walker = Walker(analysis, lambda node, missing, who: None, around=around)
        for statement in module.defs:
            walker.visit(statement)
        cached = _AROUND[module.fullname] = (module, analysis, around)
    _, analysis, around = cached
    if id(call) not in around:
        return  # not reached by the walk: a lambda counted where it is called
    handled = around[id(call)]
    performed = analysis.performed(call)
    if performed is None or handled is None:
        return
    row, who = performed
    missing = row - handled
    if missing:
        message = (
            f"{subject(missing, who, passive=' performed', active='')} at module level, "
            'where no enclosing "with" handles it'
        )
        api.fail(message, call, code=UNHANDLED)

"""What the plugin reports: its error codes and how it names effects in messages."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from mypy.errorcodes import ErrorCode
from mypy.nodes import (
    CallExpr,
    Context,
    Expression,
    IndexExpr,
    MemberExpr,
    NameExpr,
)

from ._names import Row, effax_name

__all__ = [
    "subject",
    "DEBUG_VARIABLE",
    "HANDLER_TYPE",
    "Sink",
    "UNDECLARED",
    "UNHANDLED",
    "describe",
    "quoted",
    "short",
]

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


DEBUG_VARIABLE: Final = "EFFAX_MYPY_PLUGIN_DEBUG"


Sink = Callable[[Context, Row, "str | None"], None]


def describe(expr: Expression) -> str:
    if isinstance(expr, NameExpr | MemberExpr):
        name = effax_name(expr.fullname)
        return f"effax.{name}" if name else expr.name
    if isinstance(expr, CallExpr):
        return f"{describe(expr.callee)}(...)"
    if isinstance(expr, IndexExpr):  # `Buffer[int]`: the class
        return describe(expr.base)
    return "this call"


def short(fullname: str) -> str:
    return fullname.rpartition(".")[2]


def quoted(row: Row) -> str:
    return ", ".join(f'"{short(name)}"' for name in sorted(row, key=short))


def subject(missing: Row, who: str | None, *, passive: str, active: str) -> str:
    """The subject of a report: ``Effect "t" is<passive>`` for an operation, or
    ``"f" performs effect "t"<active>`` for a call of `who`."""
    noun = "effect" if len(missing) == 1 else "effects"
    if who is None:
        verb = "is" if len(missing) == 1 else "are"
        return f"{noun.capitalize()} {quoted(missing)} {verb}{passive}"
    return f'"{who}" performs {noun} {quoted(missing)}{active}'

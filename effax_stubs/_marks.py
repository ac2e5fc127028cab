"""Declarations: markers the plugin records in the types it returns (which effect
a declaration or handler is, which row a function has)."""

from __future__ import annotations

from typing import Final, NamedTuple

from mypy.nodes import (
    CallExpr,
    IndexExpr,
    NameExpr,
    RefExpr,
    TypeInfo,
)
from mypy.types import CallableType, ExtraAttrs, Instance, Type, get_proper_type

from ._names import Row, has_star, is_effect_class, keyword, kind_of

__all__ = [
    "CODE",
    "DEFAULT",
    "FORWARDS",
    "INTERCEPTS",
    "Declaration",
    "EFFECT",
    "HANDLES",
    "ROW",
    "STATIC",
    "TRACED",
    "declaration_in",
    "declaration_marks",
    "declaration_of_type",
    "handles_of_type",
    "marked_instance",
    "marks_of",
    "members",
    "row_marks",
    "row_of_type",
    "with_marks",
]

# Markers in `Instance.extra_attrs.immutable` (never valid attribute names):
EFFECT: Final = "effax-effect:"  # + the declaration's full name, on an effect's type


STATIC: Final = "effax-static"  # on a static Ask's type


TRACED: Final = "effax-traced"  # on a traced Ask's type


DEFAULT: Final = "effax-default"  # on the type of an Ask declared with `default=`


HANDLES: Final = "effax-handles"  # on a handler's type, with "effax-handles:<effect>"


ROW: Final = "effax-row"  # on a function type's fallback, with "effax-row:<effect>"
# on an interceptor's type (`effax.intercept(...)`), for other modules: the effect it
# intercepts, whether it forwards it, and what its code performs ("effax-code:<effect>")
INTERCEPTS: Final = "effax-intercepts"
FORWARDS: Final = "effax-forwards"
CODE: Final = "effax-code"


def marks_of(typ: Type | None) -> frozenset[str]:
    proper = get_proper_type(typ) if typ is not None else None
    if isinstance(proper, CallableType):
        proper = proper.fallback
    if isinstance(proper, Instance) and proper.extra_attrs is not None:
        return frozenset(proper.extra_attrs.immutable)
    return frozenset()


def members(marks: frozenset[str], prefix: str) -> Row:
    start = len(prefix) + 1
    return frozenset(mark[start:] for mark in marks if mark.startswith(prefix + ":"))


def marked_instance(instance: Instance, marks: set[str]) -> Instance:
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


def with_marks(typ: Type, marks: set[str]) -> Type:
    """`typ` with `marks` added (to the fallback of a function type)."""
    proper = get_proper_type(typ)
    if isinstance(proper, Instance):
        return marked_instance(proper, marks)
    if isinstance(proper, CallableType):
        return proper.copy_modified(fallback=marked_instance(proper.fallback, marks))
    return typ


def row_marks(row: Row) -> set[str]:
    return {ROW} | {f"{ROW}:{name}" for name in row}


def row_of_type(typ: Type | None) -> Row | None:
    marks = marks_of(typ)
    return members(marks, ROW) if ROW in marks else None


def handles_of_type(typ: Type | None) -> Row | None:
    marks = marks_of(typ)
    return members(marks, HANDLES) if HANDLES in marks else None


class Declaration(NamedTuple):
    """A module-level effect declaration, identified by the variable's full name."""

    fullname: str
    kind: str | None  # one of `KINDS` ("Ask", ...), or None for other effects
    static: bool | None  # for an Ask: its `static=`; None where not known
    # an Ask declared with `default=`: `ask()` answers it where no handler is installed,
    # so it is never unhandled (it still counts in rows); False where not known
    default: bool = False


def declaration_of_type(typ: Type | None) -> Declaration | None:
    proper = get_proper_type(typ) if typ is not None else None
    if not isinstance(proper, Instance):
        return None
    marks = marks_of(proper)
    names = [mark[len(EFFECT) :] for mark in marks if mark.startswith(EFFECT)]
    if len(names) != 1:
        return None
    static = True if STATIC in marks else False if TRACED in marks else None
    return Declaration(names[0], kind_of(proper.type), static, DEFAULT in marks)


def declaration_marks(declaration: Declaration) -> set[str]:
    """The marks of a declaration's type: which effect it is, static or not, default."""
    marks = {EFFECT + declaration.fullname}
    if declaration.static is not None and declaration.kind == "Ask":
        marks.add(STATIC if declaration.static else TRACED)
    if declaration.default:
        marks.add(DEFAULT)
    return marks


def declaration_in(value: CallExpr, fullname: str) -> Declaration | None:
    """The declaration `fullname = value`, if `value` constructs an effect."""
    callee = value.callee.base if isinstance(value.callee, IndexExpr) else value.callee
    if not isinstance(callee, RefExpr) or not isinstance(callee.node, TypeInfo):
        return None
    if not is_effect_class(callee.node):
        return None
    static: bool | None = False
    flag = keyword(value, "static")
    if flag is not None:
        literal = flag.fullname if isinstance(flag, NameExpr) else None
        static = {"builtins.True": True, "builtins.False": False}.get(literal or "")
    kind = kind_of(callee.node)
    default = keyword(value, "default")
    # `default=NO_DEFAULT` (effax's own sentinel) declares none; `**options` may hold
    # one: taken as a default (so that nothing is reported unhandled for it)
    given = has_star(value) or (
        default is not None
        and not (isinstance(default, RefExpr) and (default.fullname or "").endswith(".NO_DEFAULT"))
    )
    return Declaration(fullname, kind, static, kind == "Ask" and given)

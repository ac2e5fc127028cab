"""Handler checks (rule 3): a handler given a value its effect cannot carry."""

from __future__ import annotations

from typing import Final

from mypy.nodes import (
    CallExpr,
    MemberExpr,
    NameExpr,
    TypeInfo,
)
from mypy.plugin import CheckerPluginInterface, MethodContext
from mypy.subtypes import is_subtype
from mypy.types import AnyType, Instance, TupleType, Type, get_proper_type

from ._marks import declaration_of_type
from ._names import UNHASHABLE_CLASSES
from ._report import HANDLER_TYPE, short

__all__ = ["PROMOTED", "check_value", "is_hashable", "is_text", "narrower_name", "type_name"]


def check_value(ctx: MethodContext) -> None:
    """Rule 3: a handler given a value its effect cannot carry (`HANDLER_TYPE`)."""
    call = ctx.context
    if not isinstance(call, CallExpr) or not isinstance(call.callee, MemberExpr):
        return
    receiver = get_proper_type(ctx.type)
    declaration = declaration_of_type(receiver)
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
    effect = f'{kind} "{short(declaration.fullname)}"'
    problem: str | None = None
    if kind == "Ask" and declaration.static and not is_hashable(ctx.api, value):
        problem = (
            f"{effect} is static, so its value is hashed into the jit cache key, but "
            f'"{method}" is given an unhashable "{type_name(value)}"; pass a hashable '
            "value (a tuple, a frozen dataclass) or declare it with static=False"
        )
    elif (kind == "State" or declaration.static is False) and is_text(value):
        problem = (
            f"{effect} is traced, so its value crosses jax.jit as an array, but "
            f'"{method}" is given a "{type_name(value)}"'
            + ("; declare it with static=True" if kind == "Ask" else "")
        )
    elif kind == "State" and receiver.args:
        declared = get_proper_type(receiver.args[0])
        narrower = narrower_name(declared, value)
        if narrower is not None:
            problem = (
                f'{effect} holds "{type_name(declared)}" values but is initialised with '
                f'"{narrower}": its dtype would change on the first update inside a '
                f"traced region; initialise it with a {type_name(declared)}"
            )
    if problem is not None:
        ctx.api.fail(problem, call, code=HANDLER_TYPE)


def is_hashable(api: CheckerPluginInterface, typ: Type) -> bool:
    proper = get_proper_type(typ)
    if isinstance(proper, Instance) and (
        any(base.fullname in UNHASHABLE_CLASSES for base in proper.type.mro)
        or _unhashable_dataclass(proper.type)
    ):
        return False
    return is_subtype(typ, api.named_generic_type("typing.Hashable", []))


def _unhashable_dataclass(info: TypeInfo) -> bool:
    """A dataclass whose instances Python makes unhashable (`eq=True`, the default,
    without `frozen=True`, `unsafe_hash=True` or a `__hash__` of its own), which
    mypy's dataclass plugin does not mark (its attrs plugin does)."""
    data = info.metadata.get("dataclass")
    if data is None or data.get("frozen") or "__hash__" in info.names:
        return False
    for decorator in info.defn.decorators:
        if isinstance(decorator, CallExpr):
            for name, arg in zip(decorator.arg_names, decorator.args, strict=True):
                value = arg.name if isinstance(arg, NameExpr) else None
                if (name, value) in (("eq", "False"), ("unsafe_hash", "True")):
                    return False
    return True


def is_text(typ: Type) -> bool:
    proper = get_proper_type(typ)
    return isinstance(proper, Instance) and proper.type.fullname in (
        "builtins.str",
        "builtins.bytes",
    )


# mypy promotes the right-hand types to the left-hand one; JAX gives them another dtype
PROMOTED: Final = {
    "builtins.float": ("builtins.int", "builtins.bool"),
    "builtins.complex": ("builtins.int", "builtins.bool", "builtins.float"),
    "builtins.int": ("builtins.bool",),
}


def narrower_name(declared: Type, value: Type) -> str | None:
    """The name of `value`'s type where mypy promotes it to `declared`'s (also
    element by element, for tuples)."""
    declared, value = get_proper_type(declared), get_proper_type(value)
    if isinstance(declared, TupleType) and isinstance(value, TupleType):
        if len(declared.items) != len(value.items):
            return None
        pairs = list(zip(declared.items, value.items, strict=True))
        if not any(narrower_name(d, v) is not None for d, v in pairs):
            return None
        return f"tuple[{', '.join(type_name(v) for _, v in pairs)}]"
    if not isinstance(declared, Instance) or not isinstance(value, Instance):
        return None
    if value.type.fullname in PROMOTED.get(declared.type.fullname, ()):
        return value.type.name
    return None


def type_name(typ: Type) -> str:
    proper = get_proper_type(typ)
    if isinstance(proper, TupleType):
        return f"tuple[{', '.join(type_name(item) for item in proper.items)}]"
    return proper.type.name if isinstance(proper, Instance) else str(proper)

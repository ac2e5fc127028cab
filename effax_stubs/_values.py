"""Handler checks (rule 3): a handler given a value its effect cannot carry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from mypy.nodes import (
    CallExpr,
    Context,
    Expression,
    FuncItem,
    MemberExpr,
    MypyFile,
    NameExpr,
    RefExpr,
    Statement,
    TupleExpr,
    TypeInfo,
    WithStmt,
)
from mypy.plugin import CheckerPluginInterface, MethodContext
from mypy.subtypes import is_subtype
from mypy.types import AnyType, Instance, TupleType, Type, get_proper_type

from ._calls import scope_stack
from ._marks import declaration_of_type
from ._names import (
    PERFORMING,
    UNHASHABLE_CLASSES,
    callable_arguments,
    callee_fullname,
    effax_name,
    keyword,
)
from ._report import HANDLER_TYPE, short
from ._rows import Analysis
from ._tree import descendants

__all__ = [
    "PROMOTED",
    "check_value",
    "holds_hashable",
    "is_hashable",
    "is_text",
    "narrower_name",
    "reaches_compiled",
    "type_name",
]


def check_value(ctx: MethodContext, modules: Mapping[str, MypyFile]) -> None:
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
    kind, method = declaration.kind, call.callee.name
    # a type error already, which mypy reports; but an unhashable static value also
    # fails where it is provided, whatever its type (the error may be ignored)
    unhashable = (
        kind == "Ask"
        and declaration.static
        and not (is_hashable(ctx.api, value) and holds_hashable(ctx.api, ctx.args[0][0]))
    )
    if receiver.args and not is_subtype(value, receiver.args[0]) and not unhashable:
        return
    effect = f'{kind} "{short(declaration.fullname)}"'
    problem: str | None = None
    where: Context = call  # reported where run time raises
    text = (kind == "State" or declaration.static is False) and is_text(value)
    if text and receiver.args and is_text(receiver.args[0]):
        # declared to hold text (`Ask[str]`, `State[str]`), eager code may use it as
        # such: only a compiled call performing it under this handler refuses it, there
        compiled = reaches_compiled(ctx.api, modules, call, declaration.fullname)
        text, where = compiled is not None, compiled or call
    if unhashable:
        problem = (
            f"{effect} is static, so its value is hashed into the jit cache key, but "
            f'"{method}" is given an unhashable "{type_name(value)}"; pass a hashable '
            "value (a tuple, a frozen dataclass) or declare it with static=False"
        )
    elif text:
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
        ctx.api.fail(problem, where, code=HANDLER_TYPE)


def reaches_compiled(
    api: CheckerPluginInterface, modules: Mapping[str, MypyFile], call: CallExpr, effect: str
) -> CallExpr | None:
    """The compiled call performing `effect` that the handler made by `call` is
    installed around (`with call:`, or given to `effax.handle(..., transform=...)`),
    where that is plain to see in the same scope."""
    stack = scope_stack(api)
    scope = stack[-1] if stack else None
    if isinstance(scope, MypyFile):
        body: list[Statement] = scope.defs
        root = None
    elif isinstance(scope, FuncItem):
        body, root = scope.body.body, scope
    else:
        return None
    analysis = Analysis(modules, root, body)

    def installs(expr: Expression) -> bool:  # the handler itself, or a variable holding it
        return expr is call or (isinstance(expr, RefExpr) and analysis.value_of(expr) is call)

    for statement in body:
        for node in (statement, *descendants(statement)):
            if isinstance(node, WithStmt) and any(installs(e) for e in node.expr):
                inner = (n for n in descendants(node.body) if isinstance(n, CallExpr))
                return next((n for n in inner if _compiled_call(analysis, n, effect)), None)
            if (
                isinstance(node, CallExpr)
                and effax_name(callee_fullname(node.callee)) == "handle"
                and any(installs(a) for a in node.args)
            ):
                row = analysis.row_of(node.args[0]) if node.args else None
                compiled = keyword(node, "transform") is not None and effect in (row or ())
                return node if compiled else None
    return None


def _compiled_call(analysis: Analysis, call: CallExpr, effect: str) -> bool:
    """Whether `call` traces code performing `effect`: a compiled handled function
    (`effax.jit(f)`, `effax.handle(f, transform=...)`) or effax's control flow."""
    name = effax_name(callee_fullname(call.callee))
    if name in PERFORMING:  # control flow traces its functions, lambdas written there too
        functions = callable_arguments(call, name)
        return any(effect in (analysis.row_of(f) or ()) for f in functions)
    if not analysis.compiled(call.callee):
        return False
    performed = analysis.performed(call)
    return performed is not None and effect in performed[0]


def is_hashable(api: CheckerPluginInterface, typ: Type, depth: int = 0) -> bool:
    """Whether values of `typ` can be hashed: also what they hold, as Python hashes
    it (a tuple's items, a frozen dataclass's fields: a list in either is not)."""
    proper = get_proper_type(typ)
    if isinstance(proper, Instance) and (
        any(base.fullname in UNHASHABLE_CLASSES for base in proper.type.mro)
        or _unhashable_dataclass(proper.type)
    ):
        return False
    if not is_subtype(typ, api.named_generic_type("typing.Hashable", [])):
        return False
    return depth > 8 or all(is_hashable(api, t, depth + 1) for t in _held(proper))


def holds_hashable(api: CheckerPluginInterface, expr: Expression, depth: int = 0) -> bool:
    """Whether what `expr` builds in place holds hashable values, by the types mypy
    inferred for them where the declared ones say nothing (a frozen dataclass's field
    typed `Any` given a list: `Config([8, 8])`): a tuple display's items, the arguments
    of a dataclass's constructor, followed inward."""
    lookup = getattr(api, "lookup_type_or_none", None)  # (mypy's TypeChecker)
    if lookup is None or depth > 8:
        return True
    if isinstance(expr, TupleExpr):
        items = expr.items
    elif isinstance(expr, CallExpr):
        built = get_proper_type(lookup(expr))
        if not (isinstance(built, Instance) and "dataclass" in built.type.metadata):
            return True
        items = expr.args
    else:
        return True
    for item in items:
        typ = lookup(item)
        if typ is not None and not is_hashable(api, typ):
            return False
        if not holds_hashable(api, item, depth + 1):
            return False
    return True


def _held(typ: Type) -> list[Type]:
    """The types of what a value of `typ` holds and hashes with it: a tuple's items,
    a frozen dataclass's fields (generic ones are not followed)."""
    if isinstance(typ, TupleType):
        return list(typ.items)
    if not isinstance(typ, Instance):
        return []
    if typ.type.fullname == "builtins.tuple":
        return list(typ.args)
    data = typ.type.metadata.get("dataclass")
    if data is None or typ.args:
        return []
    held = []
    for attribute in data.get("attributes", ()):
        symbol = typ.type.get(attribute.get("name", ""))
        var_type = getattr(symbol.node, "type", None) if symbol is not None else None
        if var_type is not None:
            held.append(var_type)
    return held


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

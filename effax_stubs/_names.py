"""What effax looks like to the plugin: its effect kinds, operations and
wrappers, and how to read a call of one."""

from __future__ import annotations

import sys
from typing import Final

from mypy.nodes import (
    ARG_NAMED,
    ARG_POS,
    CallExpr,
    Decorator,
    Expression,
    FuncDef,
    LambdaExpr,
    ListExpr,
    RefExpr,
    TupleExpr,
    TypeInfo,
)
from mypy.types import CallableType, Instance, get_proper_type

__all__ = [
    "BUILTIN_CALLING",
    "CONTAINERS",
    "DISCRETE_SAMPLERS",
    "FOREIGN_CALLING",
    "FOREIGN_PACKAGES",
    "FOREIGN_TRANSFORMS",
    "FUNCTION_NAMES",
    "HIGHER_ORDER_PACKAGES",
    "HANDLER_CLASSES",
    "HANDLER_MAKERS",
    "KINDS",
    "OPERANDS",
    "OPERANDS_START",
    "lambda_arguments",
    "walked_in_place",
    "MAKERS",
    "OPERATIONS",
    "EFFAX_NNX",
    "PERFORMING",
    "RETURNING",
    "RNG",
    "STORING",
    "Row",
    "TRANSPARENT_DECORATORS",
    "UNHASHABLE_CLASSES",
    "callable_arguments",
    "foreign_callables",
    "foreign_higher_order",
    "HANDLER_ACCESS",
    "METADATA",
    "callee_fullname",
    "callee_of",
    "effax_method",
    "effax_name",
    "effect_operations",
    "function_argument",
    "has_star",
    "is_sampler",
    "is_handler_maker",
    "is_effect_class",
    "keyword",
    "kind_of",
    "positional_args",
]

KINDS: Final = ("Ask", "State", "StateDict", "RandomKey", "Emit", "Tap")


OPERATIONS: Final = {
    "Ask": frozenset({"ask"}),
    "State": frozenset({"get", "set", "modify"}),
    "StateDict": frozenset({"get", "set"}),
    "RandomKey": frozenset({"next_key"}),
    "Emit": frozenset({"emit"}),
    "Tap": frozenset({"tap"}),
}


# Each kind's methods that make a handler of it. Tested against the runtime API
# (tests/test_plugin_tables.py), as are the tables below.
MAKERS: Final = {
    "Ask": frozenset({"provide"}),
    "State": frozenset({"init"}),
    "StateDict": frozenset({"init"}),
    "RandomKey": frozenset({"seed"}),
    "Emit": frozenset({"collect", "discard"}),
    "Tap": frozenset({"ignore", "record", "replace", "gradients"}),
}


# any kind's (where the kind of a receiver is not known)
HANDLER_MAKERS: Final = frozenset().union(*MAKERS.values())


HANDLER_CLASSES: Final = frozenset({"Handler", "Handlers"})


# `effax.rng`, as mypy names its declaration (see `Analysis.rng`)
RNG: Final = "effax.rng"


# effect-aware wrappers that run their callable arguments during the call, with the
# positions and names of those arguments (JAX's signatures)
PERFORMING: Final = {
    "scan": ((0,), ("f",)),
    "fori_loop": ((2,), ("body_fun",)),
    "while_loop": ((0, 1), ("cond_fun", "body_fun")),
    "cond": ((1, 2), ("true_fun", "false_fun")),
    "switch": ((1,), ("branches",)),
    "map": ((0,), ("f",)),
}


# where control flow (effax's, its NNX twins', JAX's: one signature) takes the values
# its functions are called with: (the first operand's position, or None; the carry's
# position for a loop body; for each function's position, what its parameters get:
# "operands" (all of them), "carry" (the one), or "index, carry")
OPERANDS: Final = {
    "cond": {1: "operands", 2: "operands"},
    "switch": {1: "operands"},
    "fori_loop": {2: "index, carry"},
    "while_loop": {0: "carry", 1: "carry"},
    "scan": {0: "carry"},
}
OPERANDS_START: Final = {"cond": 3, "switch": 2, "fori_loop": 3, "while_loop": 2, "scan": 1}


def lambda_arguments(call: CallExpr) -> list[tuple[LambdaExpr, list[Expression | None]]]:
    """The lambdas control flow is given in `call`, each with the values its
    parameters get (None where not known), where its signature says them."""
    fullname = call.callee.fullname if isinstance(call.callee, RefExpr) else None
    if not fullname or not fullname.startswith(("effax.", "jax.")):
        return []
    name = fullname.rpartition(".")[2]
    if name not in OPERANDS:
        return []
    positional = positional_args(call)
    operands: list[Expression | None] = list(positional[OPERANDS_START[name] :])
    found: list[tuple[LambdaExpr, list[Expression | None]]] = []
    for position, passed in OPERANDS[name].items():
        if position >= len(positional):
            continue
        given = positional[position]
        functions = given.items if isinstance(given, ListExpr | TupleExpr) else [given]
        values = (
            operands[:1]
            if passed == "carry"
            else [None, *operands[:1]]
            if passed == "index, carry"
            else operands
        )
        found.extend((f, values) for f in functions if isinstance(f, LambdaExpr))
    return found


def walked_in_place(call: CallExpr) -> list[LambdaExpr]:
    """The lambdas `call` is given that count where it is made (the walker walks them
    there): its arguments, and the items of a list of branches given to control flow
    (`effax.switch(i, [lambda m, x: m(x), ...], m, x)`)."""
    given = [arg for arg in call.args if isinstance(arg, LambdaExpr)]
    return given + [f for f, _ in lambda_arguments(call) if not any(f is g for g in given)]


# wrappers returning a function with the row of their first argument
RETURNING: Final = frozenset({"jit", "grad", "value_and_grad", "vmap", "checkpoint", "shard_map"})


FUNCTION_NAMES: Final = ("fun", "f", "fn")


# Higher-order functions of JAX and its libraries, and of the standard library, by
# the last part of their full name: the transformations return a function that
# performs what the one they are given performs, when it is called (as effax's
# `RETURNING` wrappers do); the others call what they are given at once.
# (effax.nnx's twins have Flax NNX's signatures: treated as NNX's own)
EFFAX_NNX: Final = ("effax.nnx.", "effax._nnx_grad.")
HIGHER_ORDER_PACKAGES: Final = ("jax.", "equinox.", "flax.", *EFFAX_NNX)
FOREIGN_TRANSFORMS: Final = frozenset(
    {
        "grad",
        "value_and_grad",
        "vmap",
        "pmap",
        "jit",
        "pjit",
        "checkpoint",
        "remat",
        "jacfwd",
        "jacrev",
        "jacobian",
        "hessian",
        "make_jaxpr",
        "named_call",
        "shard_map",
        "custom_jvp",
        "custom_vjp",
        "filter_jit",
        "filter_grad",
        "filter_value_and_grad",
        "filter_vmap",
        "filter_pmap",
        "filter_checkpoint",
        "filter_custom_jvp",
        "filter_custom_vjp",
    }
)
# where those that call at once take their functions (JAX's and the standard
# library's signatures): by last name for JAX's, by full name for the others'
FOREIGN_CALLING: Final = {
    **PERFORMING,  # effax's control flow has JAX's signatures (`map`: `jax.tree.map` too)
    "tree_map": ((0,), ("f",)),
    "associative_scan": ((0,), ("fn",)),
    "eval_shape": ((0,), ("fun",)),
    "vjp": ((0,), ("fun",)),
    "jvp": ((0,), ("fun",)),
    "linearize": ((0,), ("fun",)),
}
BUILTIN_CALLING: Final = {
    "builtins.map": ((0,), ()),
    "builtins.filter": ((0,), ()),
    "builtins.sorted": ((), ("key",)),
    "builtins.list.sort": ((), ("key",)),  # `xs.sort(key=f)`, by the receiver's class
    "builtins.min": ((), ("key",)),
    "builtins.max": ((), ("key",)),
    "functools.reduce": ((0,), ()),
    "itertools.starmap": ((0,), ()),
}


# calls that keep the functions they are given for later, instead of calling them
STORING: Final = frozenset(
    {
        "functools.partial",
        "dataclasses.field",
        "attr.ib",
        "attr.attrib",
        "attr.Factory",
        "attrs.field",
        "attrs.Factory",
        "collections.defaultdict",
        "builtins.property",
        "atexit.register",
        "threading.Thread",
        "threading.Timer",
        "weakref.finalize",
        "signal.signal",
    }
)
# containers, whose methods store what they are given (but for those in `BUILTIN_CALLING`)
CONTAINERS: Final = frozenset(
    {
        "builtins.list",
        "builtins.dict",
        "builtins.set",
        "collections.deque",
        "collections.OrderedDict",
        "collections.defaultdict",
        "queue.Queue",
    }
)


def foreign_higher_order(fullname: str | None) -> str | None:
    """``"returns"`` for a function transformation of JAX or its libraries (the
    returned function performs what it was given), ``"calls"`` for a higher-order
    function that calls what it is given at once (``jax.lax.scan``, ``map``,
    ``sorted(key=...)``), None for anything else."""
    if not fullname:
        return None
    if fullname in BUILTIN_CALLING:
        return "calls"
    if not fullname.startswith(HIGHER_ORDER_PACKAGES):
        return None
    name = fullname.rpartition(".")[2]
    nnx_scan = name == "scan" and fullname.startswith(("flax.", *EFFAX_NNX))
    if name in FOREIGN_TRANSFORMS or nnx_scan:
        return "returns"  # (Flax NNX's scan, and its effax.nnx twin, return a function)
    return "calls" if name in FOREIGN_CALLING else None


# decorators that keep a row as it is
TRANSPARENT_DECORATORS: Final = frozenset(
    {
        "builtins.staticmethod",
        "builtins.classmethod",
        "builtins.property",  # its row counts where the attribute is read
        "functools.cached_property",
        "abc.abstractmethod",
        "typing.final",
        "typing_extensions.final",
        "typing.override",
        "typing_extensions.override",
    }
)


# context managers from these packages install no effax handlers
FOREIGN_PACKAGES: Final = frozenset(sys.stdlib_module_names) | {
    "jax",
    "jaxlib",
    "numpy",
    "pytest",
    "_pytest",
    "hypothesis",
    "typing_extensions",
}


UNHASHABLE_CLASSES: Final = frozenset({"jax._src.basearray.Array", "numpy.ndarray"})


Row = frozenset[str]  # effects, by the full name of their declaration


# `effax.random`'s samplers that effax defines in `effax._discrete` (re-exported)
DISCRETE_SAMPLERS = frozenset({"bernoulli", "categorical", "choice", "permutation", "randint"})


def is_sampler(fullname: str | None) -> bool:
    """Whether `fullname` is one of `effax.random`'s samplers, wherever effax
    defines it: each performs its `stream=` (`effax.rng` by default)."""
    if not fullname:
        return False
    module, _, name = fullname.rpartition(".")
    return module == "effax.random" or (module == "effax._discrete" and name in DISCRETE_SAMPLERS)


def effax_name(fullname: str | None) -> str | None:
    """`scan` for `effax.scan` or `effax._control.scan`; None for anything else."""
    if not fullname or not fullname.startswith("effax.") or fullname.startswith(EFFAX_NNX):
        return None
    parts = fullname.split(".")
    if all(part.startswith("_") for part in parts[1:-1]):
        return parts[-1]
    return None


def effax_method(fullname: str) -> tuple[str, str] | None:
    """`("Ask", "ask")` for `effax._ask.Ask.ask`; None for anything else."""
    parts = fullname.split(".")
    if len(parts) < 3 or parts[0] != "effax" or parts[-2] not in KINDS:
        return None
    if not all(part.startswith("_") for part in parts[1:-2]):
        return None
    return parts[-2], parts[-1]


def kind_of(info: TypeInfo) -> str | None:
    """The effax effect class (`Ask`, ...) that `info` is or derives from."""
    for base in info.mro:
        name = effax_name(base.fullname)
        if name in KINDS:
            return name
    return None


def is_effect_class(info: TypeInfo) -> bool:
    return any(effax_name(base.fullname) == "Effect" for base in info.mro)


# A user-defined effect class (a subclass of `effax.Effect`) keeps the names of its
# operations in its `TypeInfo.metadata[METADATA]["operations"]`, found when mypy
# analyses the class (its methods calling `self.handler()`); mypy keeps the metadata
# for other modules and in its incremental cache, where method bodies are gone.
METADATA: Final = "effax"


# `Effect`'s own methods that reach the innermost handler: a method of an effect
# class calling one of these (or another operation of the class) is an operation
HANDLER_ACCESS: Final = frozenset({"handler", "handler_for_write"})


def effect_operations(info: TypeInfo) -> frozenset[str]:
    """The operations of the effect class `info`: effax's own kinds' or, for a
    user-defined effect, those recorded in its class's metadata (and its bases')."""
    kind = kind_of(info)
    if kind is not None:
        return OPERATIONS[kind]
    found: set[str] = set()
    for base in info.mro:
        found.update(base.metadata.get(METADATA, {}).get("operations", ()))
    return frozenset(found)


def is_handler_maker(info: TypeInfo, name: str) -> bool:
    """Whether `name` of the effect class `info` makes a handler: one of effax's
    makers, or a method of a user-defined effect annotated to return an
    `effax.Handler`."""
    kind = kind_of(info)
    if kind is not None:
        return name in MAKERS[kind]
    symbol = info.get(name)
    node = symbol.node if symbol is not None else None
    if isinstance(node, Decorator):
        node = node.func
    typ = get_proper_type(node.type) if isinstance(node, FuncDef) else None
    if not isinstance(typ, CallableType):
        return False
    returned = get_proper_type(typ.ret_type)
    return isinstance(returned, Instance) and any(
        effax_name(base.fullname) == "Handler" for base in returned.type.mro
    )


def callee_fullname(expr: Expression) -> str | None:
    return expr.fullname if isinstance(expr, RefExpr) and expr.fullname else None


def callee_of(expr: Expression) -> Expression | None:
    return expr.callee if isinstance(expr, CallExpr) else None


def positional_args(call: CallExpr) -> list[Expression]:
    """The positional arguments of `call` before any `*args`."""
    out = []
    for arg, kind in zip(call.args, call.arg_kinds, strict=True):
        if kind != ARG_POS:
            break
        out.append(arg)
    return out


def has_star(call: CallExpr) -> bool:
    return any(kind not in (ARG_POS, ARG_NAMED) for kind in call.arg_kinds)


def keyword(call: CallExpr, *names: str) -> Expression | None:
    for arg, name in zip(call.args, call.arg_names, strict=True):
        if name in names:
            return arg
    return None


def function_argument(call: CallExpr) -> Expression | None:
    positional = positional_args(call)
    return positional[0] if positional else keyword(call, *FUNCTION_NAMES)


def foreign_callables(call: CallExpr, fullname: str) -> list[Expression]:
    """The functions a higher-order function that calls at once (see
    `foreign_higher_order`) is given in `call`."""
    table = BUILTIN_CALLING.get(fullname) or FOREIGN_CALLING[fullname.rpartition(".")[2]]
    return _callables(call, table)


def callable_arguments(call: CallExpr, name: str) -> list[Expression]:
    return _callables(call, PERFORMING[name])


def _callables(call: CallExpr, table: tuple[tuple[int, ...], tuple[str, ...]]) -> list[Expression]:
    positions, keywords = table
    positional = positional_args(call)
    found = [positional[i] for i in positions if i < len(positional)]
    found.extend(arg for arg in (keyword(call, k) for k in keywords) if arg is not None)
    flat: list[Expression] = []
    for arg in found:
        if isinstance(arg, ListExpr | TupleExpr):  # switch's branches
            flat.extend(arg.items)
        else:
            flat.append(arg)
    return flat

"""What may cross a traced region's boundary, in either direction.

Going in, a handler's const and carry must be arrays or Python numbers (and its
static export hashable, where it is part of a cache key): `unplumbable` says why
not, and a handler that cannot enter is hidden behind an `Uncompilable` marker.
Coming out, an outcome's carry and values must be arrays too, and a carry must
keep its structure, shapes and dtypes (`check_outcome`); across a call (not a
loop), a carry that is a dict may gain entries (named state created on first use).

A `jax.Ref` crosses too, but never as a value: into a compiled call it is an input
(JAX takes ref arguments), and into a control-flow or batching region, whose bodies
JAX lets close over a ref but not carry one, it crosses by closure: the carries
that cross are `pin`ned (each ref leaf left out) and `unpin`ned inside and after.
What comes out may hold only the very refs that went in (`check_outcome`), and a
compiled call returns none (`check_no_ref_out`).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, NamedTuple, NoReturn, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from . import _trace
from ._context import Blocked
from ._effect import Effect
from ._errors import EffectTypeError, EffectUsageError, StateTypeError
from ._protocol import Export, Outcome

__all__ = [
    "GrowingCarry",
    "Pinned",
    "Uncompilable",
    "Signature",
    "cannot_compile",
    "check_no_ref_out",
    "check_carry",
    "check_module_updates",
    "check_outcome",
    "describe_signature",
    "graph_variables",
    "module_values",
    "nnx_dropping",
    "is_cannot_compile",
    "is_ref",
    "pin",
    "placeholder",
    "strong",
    "uncompilable_leaf",
    "uncompilable_message",
    "ref_refusal",
    "signature",
    "unpin",
    "unplumbable",
    "zeros_like",
]

_INPUT_TYPES = (jax.Array, np.ndarray, np.generic, bool, int, float, complex)


def is_ref(leaf: Any) -> bool:
    """Whether `leaf` is a `jax.Ref` (or a tracer of one)."""
    return isinstance(leaf, jax.ref.Ref) or isinstance(
        getattr(leaf, "aval", None), jax.ref.AbstractRef
    )


def uncompilable_leaf(tree: Any, *, refs: bool = True) -> Any:
    """A leaf of `tree` that cannot cross a traced region's boundary (not an array,
    a Python number or, with `refs`, a `jax.Ref`), or None."""
    for leaf in jax.tree.leaves(tree):
        if not isinstance(leaf, _INPUT_TYPES) and not (refs and is_ref(leaf)):
            return leaf
    return None


def unplumbable(
    effect: Effect[Any], export: Export, where: str, *, keyed: bool, refs: bool = True
) -> str | None:
    """Why `effect`'s handler, exporting `export`, cannot be plumbed into `where`
    (a message), or None. With `keyed`, its static export must also be hashable
    (it is part of a compilation cache key); without `refs`, `where` takes no
    `jax.Ref` (JAX's shard_map neither closes over one nor, eagerly, takes one)."""
    leaf = uncompilable_leaf((export.const, export.carry), refs=refs)
    if leaf is not None:
        if is_ref(leaf):
            return (
                f"{effect!r} holds a jax.Ref, which cannot cross {where}: JAX's shard_map "
                "takes no ref from outside it (neither closed over nor, outside jax.jit, "
                f"as an argument). Read the ref outside {where} and provide its value "
                "(`ref[...]`) as an array, and write what the function returns into it "
                "afterwards."
            )
        return uncompilable_message(effect, leaf, where)
    if keyed:
        try:
            hash(export.static)
        except TypeError:
            return (
                f"The handler of {effect!r} exports a static value of type "
                f"{type(export.static).__name__}, which is not hashable, so it cannot be "
                f"part of the cache key of {where}. Make it hashable (a tuple, a frozen "
                "dataclass), or export it as a const (an array) instead."
            )
    return None


def cannot_compile(message: str) -> EffectTypeError:
    """The error of a compiled call reading a handler that cannot cross it: its
    static export is not hashable (so it cannot be part of the cache key). An
    eager region may still read it: `is_cannot_compile` tells this error apart
    (the user sees a plain `EffectTypeError`)."""
    error = EffectTypeError(message)
    error._effax_cannot_compile = True  # type: ignore[attr-defined]
    return error


def is_cannot_compile(error: BaseException) -> bool:
    """Whether `error` was made by `cannot_compile`."""
    return getattr(error, "_effax_cannot_compile", False) is True


def uncompilable_message(effect: Effect[Any], leaf: Any, where: str) -> str:
    """Why `effect`'s handler, holding `leaf`, cannot be plumbed into `where`."""
    return (
        f"{effect!r} holds {_a(type(leaf).__name__)}, which cannot cross {where}: the "
        "values a traced function or loop body reads from its handlers (an Ask's value, a "
        f"State, a key stream) are passed in as arrays or Python numbers. "
        f"{effect.uncompilable_fix(where)}"
    )


def _a(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


class Uncompilable(Blocked):
    """Marks a handler that cannot enter a region: performing its effect inside
    raises `EffectTypeError` with `message` (unused, it is no obstacle)."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message

    def raise_for(self, effect: Effect[Any]) -> NoReturn:
        raise EffectTypeError(self.message)


@runtime_checkable
class GrowingCarry(Protocol):
    """A handler whose carry may gain entries in a region that is not a loop body or
    a cond branch (a `StateDict` cell: an entry created inside a compiled call)."""

    @staticmethod
    def carry_entered(before: Any, after: Any) -> Any:
        """Of `after`, a carry that came out of a region, the part that stands for
        `before`, the carry that went in (`after` if it did not grow)."""
        ...


def check_outcome(
    effect: Effect[Any],
    carry: Any,
    outcome: Outcome,
    where: str | None,
    *,
    grows: Callable[[Any, Any], Any] | None,
) -> None:
    """Refuse an inner handler's `outcome` that cannot leave `where` (a traced
    region, named for messages; None: an eager region), or whose carry changed
    type from `carry` (but for growth, where `grows`: a `GrowingCarry`'s
    `carry_entered`, in a region that is not a loop)."""
    if where is not None:
        _check_same_refs(effect, carry, outcome.carry, where)
    leaf = None
    if where is not None:
        leaf = uncompilable_leaf(outcome.carry) or uncompilable_leaf(outcome.values, refs=False)
    if leaf is not None:
        raise EffectTypeError(
            f"{effect!r} was given {_given(outcome, leaf)} inside {where}, which "
            "cannot leave it: what a traced function or loop body sends out "
            "through its handlers (a State's new value, emitted values) must be "
            f"arrays or Python numbers. Convert it to an array, or perform "
            f"{effect!r} outside {where}."
        )
    after = outcome.carry if grows is None else grows(carry, outcome.carry)
    check_carry(effect, carry, after)


def _check_same_refs(effect: Effect[Any], before: Any, after: Any, where: str) -> None:
    """Refuse a carry that left a region holding a ref that did not enter it."""
    entered = [leaf for leaf in jax.tree.leaves(before) if is_ref(leaf)]
    for leaf in jax.tree.leaves(after):
        if is_ref(leaf) and not any(leaf is ref for ref in entered):
            raise EffectTypeError(
                f"{effect!r} was set to another jax.Ref inside {where}: a ref crosses "
                f"{where} as the very ref installed outside it (an input, or a value its "
                "body closes over), never as a result, so it cannot be replaced there. "
                f"Write into the ref instead (`ref[...] = value`), or set {effect!r} "
                f"outside {where}."
            )


def check_no_ref_out(effect: Effect[Any], carry: Any) -> None:
    """Refuse (as `cannot_compile`: an eager region runs directly instead) a carry
    that must leave a compiled call and holds a ref: JAX returns no ref from a
    jitted function. A carry only read, or a ref written through, never leaves."""
    if any(is_ref(leaf) for leaf in jax.tree.leaves(carry)):
        raise cannot_compile(
            f"{effect!r} holds a jax.Ref in a pytree whose other values changed inside a "
            "compiled call, so the pytree would leave the call with the ref in it, and "
            "JAX returns no ref from a compiled function. Keep the ref in a State (or "
            "an Ask) of its own and the other values in another State, or write them "
            "into the ref."
        )


def ref_refusal(error: BaseException) -> str | None:
    """If `error` is JAX refusing a write into a ref that a transformed function
    closes over, the transformation: "vmap" or "grad"; else None."""
    text = str(error)
    if "array reference" not in text:
        return None
    if "with vmapped value on an unbatched" in text:
        return "vmap"
    if "with a differentiated value on a non-differentiated" in text:
        return "grad"
    return None


def _given(outcome: Outcome, leaf: Any) -> str:
    """What held `leaf`, the first leaf of `outcome` that cannot leave a region:
    "a str", or "a tuple holding a str at [1]" for a container."""
    for value in (outcome.carry, *(outcome.values or ())):
        for path, inner in jax.tree_util.tree_flatten_with_path(value)[0]:
            if inner is leaf and path:
                where = jax.tree_util.keystr(path)
                return f"a {type(value).__name__} holding a {type(leaf).__name__} at {where}"
    return f"a {type(leaf).__name__}"


# A pytree's structure, and each leaf's shape and dtype (`signature`).
Signature = tuple[Any, tuple[tuple[tuple[int, ...], Any], ...]]


def signature(tree: Any, *, exact: bool = False) -> Signature:
    """`tree`'s structure, and each leaf's shape and dtype: what a carry keeps across
    a traced boundary (`check_carry`), the branches of a cond emit alike, and a
    snapshot shares with the handlers it is restored into.

    A leaf's dtype is JAX's (a Python or 64-bit NumPy number as ``jax.jit`` takes
    it), or with `exact` its own (``np.asarray``'s for a Python number, as a saved
    snapshot holds it); a ``jax.Ref``'s is marked as one; a leaf that is no array
    (a string) has its type instead.
    """
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, tuple(_shape_and_dtype(x, exact) for x in leaves)


def _shape_and_dtype(x: Any, exact: bool) -> tuple[tuple[int, ...], Any]:
    if is_ref(x):
        return tuple(x.shape), ("Ref", x.dtype)
    if exact:
        x = x if hasattr(x, "dtype") else np.asarray(x)
        return tuple(np.shape(x)), x.dtype
    if isinstance(x, _INPUT_TYPES):
        return tuple(jnp.shape(x)), jnp.result_type(x)
    return (), type(x)


def describe_signature(sig: Signature) -> str:
    """`sig` as JAX prints types, e.g. ``PyTreeDef(*) with leaves [float32[3]]``."""
    treedef, leaves = sig
    return f"{treedef} with leaves [{', '.join(f'{_dtype_name(d)}{list(s)}' for s, d in leaves)}]"


def _dtype_name(dtype: Any) -> str:
    if isinstance(dtype, tuple):  # a ref's
        return f"Ref {_dtype_name(dtype[1])}"
    if isinstance(dtype, type):  # a leaf that is no array
        return dtype.__name__
    # key dtypes (`key<fry>`) are not numpy dtypes: name them as JAX prints them
    return str(getattr(dtype, "name", None) or jnp.dtype(dtype).name)


def check_carry(effect: Effect[Any], before: Any, after: Any) -> None:
    """Raise `StateTypeError` if a carry changed structure, shape or dtype."""
    if after is None or before is None:
        return
    sig_before, sig_after = signature(before), signature(after)
    if sig_before != sig_after:
        raise StateTypeError(
            f"{effect!r} changed its type across a traced boundary: it entered as "
            f"{describe_signature(sig_before)} and left as {describe_signature(sig_after)}. "
            "A state must keep its pytree structure, shapes and dtypes; cast the new value "
            "(e.g. `x.astype(old.dtype)`) or initialise the state with the final type."
        )


def strong(tree: Any) -> Any:
    """Strip weak types from carry leaves, so that a loop's carry keeps its type."""

    def leaf(x: Any) -> Any:
        if is_ref(x):
            return x
        if isinstance(x, (bool, int, float, complex)):
            return jnp.asarray(x, dtype=jnp.result_type(x))
        if getattr(x, "weak_type", False):
            return x.astype(x.dtype)
        return x

    return jax.tree.map(leaf, tree)


# --- values in place of those that cannot cross ------------------------------------


def placeholder(value: Any) -> Any:
    """`value`, or, if it is a tracer of another trace, zeros of its type made on
    the current trace: a value of the same kind (a tracer where the value would be
    one once plumbed in, with JAX's methods: ``.at``, ``jnp`` functions, indexing)
    that closes over no other trace."""
    if not _trace.is_tracer(value):
        return value
    return zeros_like(value.aval, traced=True)


@functools.cache
def _key_type(dtype: Any) -> tuple[Any, tuple[int, ...]]:
    """A key dtype's implementation and the shape of one key's data, asked of JAX's
    public API (an abstract evaluation, once per dtype)."""
    impls: list[Any] = []

    def data(key: Any) -> Any:
        impls.append(jax.random.key_impl(key))
        return jax.random.key_data(key)

    struct: Any = jax.ShapeDtypeStruct  # (untyped on some JAX versions)
    shape = jax.eval_shape(data, struct((), dtype)).shape
    return impls[0], tuple(shape)


def zeros_like(aval: Any, *, traced: bool = False) -> Any:
    """Zeros of an abstract value's type (a key array of zero key data for a key
    type): a concrete stand-in for a value nothing reads, or with `traced`, a JAX
    array made by the current trace (a tracer of it under a staging trace)."""
    if jnp.issubdtype(aval.dtype, jax.dtypes.extended):
        impl, key_shape = _key_type(aval.dtype)
        shape = (*aval.shape, *key_shape)
        if traced:
            return jax.random.wrap_key_data(jax.lax.full(shape, 0, jnp.uint32), impl=impl)
        # concrete under any trace: a cached value must not hold a tracer
        with jax.ensure_compile_time_eval():
            return jax.random.wrap_key_data(jnp.zeros(shape, jnp.uint32), impl=impl)
    if traced:
        return jax.lax.full(aval.shape, 0, aval.dtype)
    return np.zeros(aval.shape, aval.dtype)


# --- refs crossing a region by closure ---------------------------------------------


class Pinned(NamedTuple):
    """The refs left out of a carry that crosses a region (`pin`), each with its
    path in the carry (None counted as a leaf)."""

    refs: tuple[tuple[Any, Any], ...]


def _is_none(x: Any) -> bool:
    return x is None


def pin(carry: Any) -> tuple[Any, Pinned | None]:
    """`carry` with each `jax.Ref` leaf replaced by None (what crosses a region as
    its carry: JAX carries no ref through a loop), and the refs left out (None if
    there are none: the carry crosses as it is)."""
    leaves = jax.tree_util.tree_flatten_with_path(carry, is_leaf=_is_none)[0]
    refs = tuple((path, x) for path, x in leaves if is_ref(x))
    if not refs:
        return carry, None
    return jax.tree.map(lambda x: None if is_ref(x) else x, carry, is_leaf=_is_none), Pinned(refs)


def unpin(carry: Any, pinned: Pinned | None) -> Any:
    """A carry `pin`ned to `pinned` with its refs put back, each at its path (each
    body closes over them; after the region, they are the refs that went in). A
    carry that gained entries inside (a `StateDict`'s) keeps them as they are."""
    if pinned is None:
        return carry
    refs = dict(pinned.refs)
    put = lambda path, x: refs.get(path, x)
    return jax.tree_util.tree_map_with_path(put, carry, is_leaf=_is_none)


# --- module state a traced body would drop -------------------------------------------
# Flax NNX modules are pytrees: given to a JAX loop or batch as an argument, the body
# gets a copy, and a Variable it changes (BatchNorm statistics) is lost unless the body
# returns it. Only Flax NNX's own transforms (and effax.nnx's twins) carry it back.


def graph_variables(tree: Any) -> list[Any]:
    """The Flax NNX Variables in `tree` (none unless the program imported Flax NNX)."""
    nnx = sys.modules.get("flax.nnx")
    if nnx is None:
        return []
    variable = nnx.Variable
    found = jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, variable))
    return [leaf for leaf in found if isinstance(leaf, variable)]


def module_values(tree: Any) -> list[tuple[Any, Any]]:
    """Each Flax NNX Variable in `tree` and its value now, for `check_module_updates`."""
    return [(v, v.get_value()) for v in graph_variables(tree)]


def nnx_dropping(transform: Any) -> str | None:
    """The name of ``handle(fn, transform=transform)``, for messages, if `transform`
    passes Flax NNX modules in as arrays (a Variable changed inside is lost unless
    returned); None for NNX's own transforms (``nnx.jit``, ``nnx.remat``), which
    carry module state, and for ``jax.jit`` under ``jax.disable_jit`` (which runs
    the function on the module itself)."""
    base = transform.func if isinstance(transform, functools.partial) else transform
    if (getattr(base, "__module__", None) or "").startswith("flax."):
        return None
    if base is jax.jit and _trace.jit_disabled():
        return None
    if base is jax.jit or base is jax.checkpoint:
        return f"effax.{'jit' if base is jax.jit else 'checkpoint'}"
    return f"effax.handle(fn, transform={getattr(base, '__qualname__', repr(base))})"


def check_module_updates(where: str, before: list[tuple[Any, Any]], out: Any) -> None:
    """Refuse a body that changed a Variable of a module it was given (`before`: each
    Variable and its value at entry) without returning it in `out`."""
    returned = {id(v) for v in graph_variables(out)}
    for variable, value in before:
        if variable.get_value() is not value and id(variable) not in returned:
            twin = _NNX_TWINS.get(where)
            use = (
                f"Use {twin} (Flax NNX's arguments), which carries module state, or "
                if twin
                else "Pass the module's state explicitly and "
            )
            raise EffectUsageError(
                f"The body of {where} changed a {type(variable).__name__} of a Flax NNX "
                f"module it was given (e.g. BatchNorm statistics), but {where} passes the "
                "module in as arrays, so the change would be lost when the body returns. "
                f"{use}return the module from the body."
            )


_NNX_TWINS = {
    **{f"effax.{name}": f"effax.nnx.{name}" for name in ("scan", "vmap", "cond", "switch")},
    "effax.while_loop": "effax.nnx.while_loop",
    "effax.map": "effax.nnx.scan",
    "effax.grad": "effax.nnx.grad",
    "effax.jit": "effax.handle(fn, transform=nnx.jit)",
    "effax.checkpoint": "effax.nnx.remat",
}

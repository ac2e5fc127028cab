"""What may cross a traced region's boundary, in either direction.

Going in, a handler's const and carry must be arrays or Python numbers (and its
static export hashable, where it is part of a cache key): `unplumbable` says why
not, and a handler that cannot enter is hidden behind an `Uncompilable` marker.
Coming out, an outcome's carry and values must be arrays too, and a carry must
keep its structure, shapes and dtypes (`check_outcome`); across a call (not a
loop), a carry that is a dict may gain entries (named state created on first use).
"""

from __future__ import annotations

from typing import Any, NoReturn

import jax
import jax.numpy as jnp
import numpy as np

from ._context import Blocked
from ._effect import Effect
from ._errors import EffectTypeError, StateTypeError
from ._protocol import Export, Outcome

__all__ = [
    "Uncompilable",
    "cannot_compile",
    "check_carry",
    "check_outcome",
    "is_cannot_compile",
    "strong",
    "uncompilable_leaf",
    "uncompilable_message",
    "unplumbable",
]

_INPUT_TYPES = (jax.Array, np.ndarray, np.generic, bool, int, float, complex)


def uncompilable_leaf(tree: Any) -> Any:
    """A leaf of `tree` that cannot cross a traced region's boundary (not an array
    or a Python number), or None."""
    for leaf in jax.tree.leaves(tree):
        if not isinstance(leaf, _INPUT_TYPES):
            return leaf
    return None


def unplumbable(effect: Effect[Any], export: Export, where: str, *, keyed: bool) -> str | None:
    """Why `effect`'s handler, exporting `export`, cannot be plumbed into `where`
    (a message), or None. With `keyed`, its static export must also be hashable
    (it is part of a compilation cache key)."""
    leaf = uncompilable_leaf((export.const, export.carry))
    if leaf is not None:
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


def check_outcome(
    effect: Effect[Any], carry: Any, outcome: Outcome, where: str | None, *, grows: bool
) -> None:
    """Refuse an inner handler's `outcome` that cannot leave `where` (a traced
    region, named for messages; None: an eager region), or whose carry changed
    type from `carry` (with `grows`, a region that is not a loop: a dict carry may
    gain entries)."""
    leaf = None if where is None else uncompilable_leaf((outcome.carry, outcome.values))
    if leaf is not None:
        raise EffectTypeError(
            f"{effect!r} was given {_given(outcome, leaf)} inside {where}, which "
            "cannot leave it: what a traced function or loop body sends out "
            "through its handlers (a State's new value, emitted values) must be "
            f"arrays or Python numbers. Convert it to an array, or perform "
            f"{effect!r} outside {where}."
        )
    after = outcome.carry
    if grows and type(carry) is dict and type(after) is dict and carry.keys() <= after.keys():
        after = {name: after[name] for name in carry}
    check_carry(effect, carry, after)


def _given(outcome: Outcome, leaf: Any) -> str:
    """What held `leaf`, the first leaf of `outcome` that cannot leave a region:
    "a str", or "a tuple holding a str at [1]" for a container."""
    for value in (outcome.carry, *(outcome.values or ())):
        for path, inner in jax.tree_util.tree_flatten_with_path(value)[0]:
            if inner is leaf and path:
                where = jax.tree_util.keystr(path)
                return f"a {type(value).__name__} holding a {type(leaf).__name__} at {where}"
    return f"a {type(leaf).__name__}"


def _signature(tree: Any) -> tuple[Any, tuple[tuple[tuple[int, ...], Any], ...]]:
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, tuple((jnp.shape(x), jnp.result_type(x)) for x in leaves)


def check_carry(effect: Effect[Any], before: Any, after: Any) -> None:
    """Raise `StateTypeError` if a carry changed structure, shape or dtype."""
    if after is None or before is None:
        return
    sig_before, sig_after = _signature(before), _signature(after)
    if sig_before != sig_after:
        raise StateTypeError(
            f"{effect!r} changed its type across a traced boundary: it entered as "
            f"{_describe(sig_before)} and left as {_describe(sig_after)}. A state must "
            "keep its pytree structure, shapes and dtypes; cast the new value (e.g. "
            "`x.astype(old.dtype)`) or initialise the state with the final type."
        )


def _describe(sig: tuple[Any, tuple[tuple[tuple[int, ...], Any], ...]]) -> str:
    treedef, leaves = sig
    # key dtypes (`key<fry>`) are not numpy dtypes: name them as JAX prints them
    avals = ", ".join(f"{_dtype_name(d)}{list(s)}" for s, d in leaves)
    return f"{treedef} with leaves [{avals}]"


def _dtype_name(dtype: Any) -> str:
    return str(getattr(dtype, "name", None) or jnp.dtype(dtype).name)


def strong(tree: Any) -> Any:
    """Strip weak types from carry leaves, so that a loop's carry keeps its type."""

    def leaf(x: Any) -> Any:
        if isinstance(x, (bool, int, float, complex)):
            return jnp.asarray(x, dtype=jnp.result_type(x))
        if getattr(x, "weak_type", False):
            return x.astype(x.dtype)
        return x

    return jax.tree.map(leaf, tree)

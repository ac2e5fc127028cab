"""Arguments checked at the boundary of every public function.

Each check raises the named effax error for what a careless or clever user
passes (None, a str, a NumPy array of Python objects, a tracer that escaped a
finished transformation, a flag that is not a bool, a negative count), naming the
function, the argument and the fix, before anything is traced or changed. The
table-driven test in ``tests/test_misuse.py`` calls every public function with
such values.
"""

from __future__ import annotations

import operator
from typing import Any

import jax
import numpy as np

from . import _trace
from ._errors import EffectLeakError, EffectTypeError, EffectUsageError

__all__ = [
    "check_bool",
    "check_callable",
    "check_callables",
    "check_count",
    "check_fits",
    "check_index",
    "check_traceable",
    "check_unleaked",
    "fori_bounds",
]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_callable(value: Any, argument: str, where: str | None = None) -> None:
    """`value` (the argument `argument` of `where`) must be callable."""
    if not callable(value):
        at = f"{where}: " if where else ""
        raise EffectTypeError(
            f"{at}{argument} must be callable, but got {type(value).__name__}: {_shown(value)}."
        )


def check_callables(values: Any, argument: str, where: str) -> None:
    """`values` must be a non-empty sequence of callables."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise EffectTypeError(
            f"{where}: {argument} must be a sequence of functions, but got "
            f"{type(values).__name__}: {_shown(values)}."
        )
    if len(values) == 0:
        raise EffectUsageError(f"{where}: {argument} is empty; give at least one function.")
    for i, value in enumerate(values):
        check_callable(value, f"{argument}[{i}]", where)


def check_bool(value: Any, argument: str, where: str) -> None:
    """`value` must be True or False (a str such as "yes" is not)."""
    if not isinstance(value, (bool, np.bool_)):
        raise EffectTypeError(
            f"{where} takes {argument}=True or False, but got "
            f"{type(value).__name__}: {_shown(value)}."
        )


def check_count(
    value: Any, argument: str, where: str, *, optional: bool = False, minimum: int = 1
) -> None:
    """`value` must be a Python int of at least `minimum` (or None if `optional`)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        kind = "non-negative" if minimum == 0 else "positive"
        none = " (or None)" if optional else ""
        raise EffectUsageError(
            f"{where} got {argument}={_shown(value)}: it must be a {kind} Python int{none}."
        )


def check_index(value: Any, argument: str, where: str) -> None:
    """`value` must be an integer (a Python int, or an integer scalar array or
    tracer), as a loop bound or a branch index is."""
    dtype = getattr(value, "dtype", None)
    ok = (isinstance(value, (int, np.integer)) and not isinstance(value, bool)) or (
        dtype is not None and np.ndim(value) == 0 and jax.numpy.issubdtype(dtype, np.integer)
    )
    if not ok:
        raise EffectTypeError(
            f"{where} takes {argument} as an integer (a Python int or an integer scalar "
            f"array), but got {type(value).__name__}: {_shown(value)}."
        )
    check_unleaked(value, argument, where)


def check_fits(value: int, dtype: Any, argument: str, where: str) -> None:
    """`value` (a Python int, e.g. a loop bound) must fit the integer `dtype` it
    becomes (JAX would wrap it around, or refuse it with its own OverflowError)."""
    info = np.iinfo(dtype)
    if not info.min <= value <= info.max:
        raise EffectTypeError(
            f"{where} got {argument}={value}, which does not fit the loop index's dtype "
            f"{np.dtype(dtype).name} (from {info.min} to {info.max}): the index would wrap "
            "around. Give bounds within that range, as jax.lax.fori_loop requires."
        )


def check_unleaked(tree: Any, argument: str, where: str) -> None:
    """`tree` must hold no tracer of a trace other than the current one or its
    ancestors: a value that escaped a finished ``jax.jit`` (or another
    transformation) cannot be computed with."""
    if _trace.foreign_tracers(jax.tree.leaves(tree), _trace.current_trace_ref()):
        raise EffectLeakError(
            f"{where} was given, in {argument}, a tracer of a transformation that has "
            "finished (a value saved out of a jax.jit, jax.grad or effax wrapper while it "
            "was being traced). Return the value from the transformed function instead "
            "of saving it, and pass what it returned."
        )


def check_traceable(tree: Any, argument: str, where: str) -> None:
    """`tree` must hold only what JAX can trace (arrays and Python numbers, no
    str, no NumPy array of Python objects) and no leaked tracer."""
    for leaf in jax.tree.leaves(tree):
        bad = None
        if isinstance(leaf, (str, bytes)):
            bad = f"a {type(leaf).__name__} ({_shown(leaf)})"
        elif isinstance(leaf, np.ndarray) and leaf.dtype == object:
            bad = "a NumPy array of Python objects (dtype=object)"
        elif leaf is not None and not _trace.is_tracer(leaf) and not _is_array_like(leaf):
            bad = f"a {type(leaf).__name__}"
        if bad is not None:
            raise EffectTypeError(
                f"{where} takes {argument} as arrays and Python numbers (a pytree of "
                f"them), but it holds {bad}, which JAX cannot trace. Convert it to a "
                "numeric array, or keep it out of the traced values (close over it, or "
                "provide it through an effax.Ask(..., static=True))."
            )
    check_unleaked(tree, argument, where)


def _is_array_like(leaf: Any) -> bool:
    if isinstance(leaf, (bool, int, float, complex, np.ndarray, np.generic, jax.Array)):
        return True
    return hasattr(leaf, "__jax_array__") or isinstance(leaf, jax.ShapeDtypeStruct)


def fori_bounds(lower: Any, upper: Any, where: str) -> tuple[int, int, Any] | None:
    """A fori_loop's bounds as Python ints and their index dtype (each checked to
    fit it: `jax.lax.fori_loop` refuses what would wrap), or None if they are traced."""
    check_index(lower, "lower", where)
    check_index(upper, "upper", where)
    try:
        lo, hi = operator.index(lower), operator.index(upper)
    except TypeError:  # traced bounds (a ConcretizationTypeError is a TypeError)
        return None
    dtype = jax.numpy.result_type(lower, upper)
    check_fits(lo, dtype, "lower", where)
    check_fits(hi, dtype, "upper", where)
    return lo, hi, dtype

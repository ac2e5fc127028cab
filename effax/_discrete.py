"""Keyless discrete draws (`bernoulli`, `categorical`, `randint`, `permutation`,
`choice`), re-exported by `effax.random` with the continuous samplers, and `draw`,
how every sampler of `effax.random` calls its `jax.random` namesake: all its
arguments checked before a key is drawn, so that a refused call changes nothing."""

from __future__ import annotations

import inspect
from collections.abc import Hashable, Sequence
from typing import Any

import jax
import numpy as np

from . import _trace
from ._arguments import check_unleaked
from ._errors import EffectError, EffectTypeError, EffectUsageError
from ._random_key import RandomKey, check_sampler, rng

__all__ = ["bernoulli", "categorical", "choice", "draw", "permutation", "randint"]

Shape = Sequence[int]
DType = Any
ArrayLike = Any

# The argument lists jax.random accepted, by sampler and abstract arguments (see
# `_accepted_key`): an accepted call is checked once, not at every eager call.
_ACCEPTED: dict[Hashable, None] = {}
_MOST_ACCEPTED = 4096
_INT32 = range(-(2**31), 2**31)


def draw(
    sampler: str, stream: Any, arguments: dict[str, Any], *, by_value: tuple[str, ...] = ()
) -> jax.Array:
    """``jax.random.<sampler>(key, **arguments)`` with the next key of `stream`.

    Every argument is checked before the key is drawn: `stream` and ``shape`` by
    `check_sampler`, then the call itself, run abstractly (``jax.eval_shape``, no
    key drawn, nothing computed), so that whatever JAX would refuse is refused
    here first, as a named error, and the stream's counter stays where it was. An
    accepted list of arguments is remembered by its abstract values (shapes and
    dtypes of arrays, static values, the JAX settings that change what is
    accepted); the arguments named in `by_value` are ones JAX reads by value
    (`choice`'s population), remembered by value.
    """
    where = f"effax.random.{sampler}"
    check_sampler(stream, where, arguments.get("shape", ()))
    fn = getattr(jax.random, sampler)
    signature = _accepted_key(sampler, arguments, by_value)
    if signature is None or signature not in _ACCEPTED:
        if _has_tracer(arguments):
            for name, value in arguments.items():
                check_unleaked(value, f"`{name}`", where)
        error = _refusal(fn, arguments)
        if error is not None:
            raise _named(sampler, stream, arguments, error) from error
        if signature is not None:
            if len(_ACCEPTED) >= _MOST_ACCEPTED:
                _ACCEPTED.clear()
            _ACCEPTED[signature] = None
    key = stream.next_key()
    return fn(key, **arguments)  # type: ignore[no-any-return]


def _refusal(fn: Any, arguments: dict[str, Any]) -> Exception | None:
    """The error JAX raises for `fn` called with `arguments` (and a key), or None."""
    try:
        jax.eval_shape(lambda: fn(jax.random.key(0), **arguments))
    except EffectError:
        raise
    except Exception as error:  # whatever JAX refuses the arguments with
        return error
    return None


def _named(sampler: str, stream: Any, arguments: dict[str, Any], error: Exception) -> EffectError:
    """`error` (JAX's refusal of `sampler`'s arguments) as a named effax error."""
    fn = getattr(jax.random, sampler)
    parameters = inspect.signature(fn).parameters
    blamed = []  # the arguments that, alone at JAX's default, make the call accepted
    for name, value in arguments.items():
        default = parameters[name].default if name in parameters else inspect.Parameter.empty
        if default is inspect.Parameter.empty or value is default:
            continue
        if _refusal(fn, {**arguments, name: default}) is None:
            blamed.append(name)
    call = ", ".join(f"{name}={_shown(value)}" for name, value in arguments.items())
    names = " and ".join(f"`{name}`" for name in blamed)
    if len(blamed) == 1:
        what, fix = f"its {names}", f"Change {names} to a value"
    elif blamed:
        what = f"its {names} together (with either one at its default, it accepts the call)"
        fix = "Change " + " or ".join(f"`{name}`" for name in blamed) + " to a value"
    else:
        what, fix = "these arguments", "Pass arguments"
    text = str(error).strip()
    reason = text.splitlines()[0].rstrip(".") if text else type(error).__name__
    message = (
        f"effax.random.{sampler}({call}): jax.random.{sampler} refuses {what}: {reason}. "
        f"Nothing was drawn from {stream!r}: its counter is where it was. {fix} that "
        f"jax.random.{sampler} takes (see its documentation)."
    )
    named = EffectTypeError if isinstance(error, TypeError) else EffectUsageError
    return named(message)


def _shown(value: Any) -> str:
    if isinstance(value, (jax.Array, np.ndarray, np.generic)):
        return f"{value.dtype}{list(value.shape)}"
    if isinstance(value, type):
        return value.__name__  # a dtype given as a type: float, jnp.int32, ...
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _has_tracer(arguments: dict[str, Any]) -> bool:
    return any(_trace.is_tracer(leaf) for leaf in jax.tree.leaves(list(arguments.values())))


def _accepted_key(
    sampler: str, arguments: dict[str, Any], by_value: tuple[str, ...]
) -> Hashable | None:
    """What decides whether JAX accepts `arguments`: their abstract values, and the
    settings that change how JAX promotes them; None when an argument has none
    (then the call is checked every time)."""
    config = jax.config
    parts: list[Hashable] = [
        sampler,
        # (read by name: one JAX line declares these attributes, another does not)
        getattr(config, "jax_enable_x64"),  # noqa: B009
        getattr(config, "jax_numpy_rank_promotion"),  # noqa: B009
        getattr(config, "jax_numpy_dtype_promotion"),  # noqa: B009
    ]
    for name, value in arguments.items():
        part = _abstract(value, name in by_value)
        if part is None:
            return None
        parts.append(part)
    return tuple(parts)


def _abstract(value: Any, by_value: bool) -> Hashable | None:
    """`value` as far as JAX's checks read it: a Python number's type (an int's
    value if it does not fit an int32, or if JAX reads it by value), an array's
    abstract value (and an integer scalar's value if JAX reads it by value), other
    arguments (shapes, dtypes, flags, None) by value."""
    if isinstance(value, bool):
        return (bool, value)
    if isinstance(value, int):
        return (int, value) if by_value or value not in _INT32 else (int,)
    if isinstance(value, (float, complex)):
        return (type(value),)
    if isinstance(value, (jax.Array, np.ndarray, np.generic)):
        if isinstance(value, np.ndarray) and value.dtype == object:
            return None
        aval = jax.typeof(value)
        concrete = not value.shape and not _trace.is_tracer(value)
        if by_value and concrete and np.issubdtype(value.dtype, np.integer):
            return (aval, int(value))
        return (aval,)
    if isinstance(value, list):
        return None
    try:
        hash(value)
    except TypeError:
        return None
    return (type(value), value)


@_trace.api_boundary
def bernoulli(
    p: ArrayLike = 0.5, shape: Shape | None = None, *, stream: RandomKey = rng
) -> jax.Array:
    """Booleans that are true with probability `p`.

    Calls `jax.random.bernoulli` with the next key of `stream`.

    **Arguments:**

    - `p`: the probability of `True`, broadcastable to `shape`.
    - `shape`: the shape of the result (default: the shape of `p`).
    - `stream`: the key stream to draw from (default `effax.rng`).

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> with effax.rng.seed(0):
    ...     mask = effax.random.bernoulli(0.9, (4, 5))
    ...     certain = effax.random.bernoulli(jnp.array([0.0, 1.0]))
    >>> mask.shape, mask.dtype
    ((4, 5), dtype('bool'))
    >>> certain.tolist()
    [False, True]

    """
    return draw("bernoulli", stream, {"p": p, "shape": shape})


@_trace.api_boundary
def categorical(
    logits: ArrayLike,
    axis: int = -1,
    shape: Shape | None = None,
    *,
    stream: RandomKey = rng,
) -> jax.Array:
    """Indices drawn with probabilities ``softmax(logits)``.

    Calls `jax.random.categorical` with the next key of `stream`.

    **Arguments:**

    - `logits`: unnormalised log-probabilities; ``-inf`` is never drawn.
    - `axis`: the axis of `logits` that holds the categories.
    - `shape`: the shape of the result (default: `logits.shape` without `axis`).
    - `stream`: the key stream to draw from (default `effax.rng`).

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> with effax.rng.seed(0):
    ...     rows = effax.random.categorical(jnp.zeros((2, 3)))
    ...     only_one = effax.random.categorical(jnp.log(jnp.array([0.0, 1.0, 0.0])), shape=(4,))
    >>> rows.shape, bool(((0 <= rows) & (rows < 3)).all())
    ((2,), True)
    >>> only_one.tolist()
    [1, 1, 1, 1]

    """
    return draw("categorical", stream, {"logits": logits, "axis": axis, "shape": shape})


@_trace.api_boundary
def randint(
    shape: Shape,
    minval: ArrayLike,
    maxval: ArrayLike,
    dtype: DType = int,
    *,
    stream: RandomKey = rng,
) -> jax.Array:
    """Integers in ``[minval, maxval)``.

    Calls `jax.random.randint` with the next key of `stream`.

    **Arguments:**

    - `shape`: the shape of the result.
    - `minval`, `maxval`: the bounds (`maxval` excluded), broadcastable to `shape`.
    - `dtype`: an integer dtype.
    - `stream`: the key stream to draw from (default `effax.rng`).

    **Example:**

    >>> import effax
    >>> with effax.rng.seed(0):
    ...     dice = effax.random.randint((100,), 1, 7)
    >>> dice.shape, dice.dtype
    ((100,), dtype('int32'))
    >>> bool((1 <= dice).all() & (dice < 7).all())
    True

    """
    arguments = {"shape": shape, "minval": minval, "maxval": maxval, "dtype": dtype}
    return draw("randint", stream, arguments)


@_trace.api_boundary
def permutation(
    x: int | ArrayLike, axis: int = 0, independent: bool = False, *, stream: RandomKey = rng
) -> jax.Array:
    """A random permutation of ``arange(x)`` (`x` an int) or of `x` along `axis`.

    Calls `jax.random.permutation` with the next key of `stream`.

    **Arguments:**

    - `x`: an int ``n`` (permute ``arange(n)``) or an array to shuffle along `axis`.
    - `axis`: the axis to shuffle.
    - `independent`: shuffle each slice along `axis` independently.
    - `stream`: the key stream to draw from (default `effax.rng`).

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> with effax.rng.seed(0):
    ...     order = effax.random.permutation(5)
    ...     rows = effax.random.permutation(jnp.arange(6).reshape(3, 2))
    >>> sorted(order.tolist())
    [0, 1, 2, 3, 4]
    >>> rows.shape, sorted(rows[:, 0].tolist())
    ((3, 2), [0, 2, 4])

    """
    arguments = {"x": x, "axis": axis, "independent": independent}
    return draw("permutation", stream, arguments, by_value=("x",))


@_trace.api_boundary
def choice(
    a: int | ArrayLike,
    shape: Shape = (),
    replace: bool = True,
    p: ArrayLike | None = None,
    axis: int = 0,
    *,
    stream: RandomKey = rng,
) -> jax.Array:
    """Random elements of `a` (an int ``n`` for ``arange(n)``, or an array).

    Calls `jax.random.choice` with the next key of `stream`.

    **Arguments:**

    - `a`: an int ``n`` (sample from ``arange(n)``) or an array to sample along `axis`.
    - `shape`: the shape of the result (default: a single sample).
    - `replace`: sample with replacement; without it, ``prod(shape)`` must not exceed
      the number of candidates.
    - `p`: the probability of each candidate (default: uniform).
    - `axis`: the axis of `a` to sample along.
    - `stream`: the key stream to draw from (default `effax.rng`).

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> with effax.rng.seed(0):
    ...     picks = effax.random.choice(10, (3,), replace=False)
    ...     weighted = effax.random.choice(
    ...         jnp.array([10, 20, 30]), (4,), p=jnp.array([0.0, 1.0, 0.0])
    ...     )
    >>> picks.shape, len(set(picks.tolist()))
    ((3,), 3)
    >>> weighted.tolist()
    [20, 20, 20, 20]

    """
    arguments = {"a": a, "shape": shape, "replace": replace, "p": p, "axis": axis}
    return draw("choice", stream, arguments, by_value=("a",))

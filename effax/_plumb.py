"""`plumb_and_transform`, and applying a transformation to a plumbing wrapper.

The pattern underneath every compiled effax call is the *double wrapper*: outside
the transformation, compute what the function reads from its context; pass it in
as an explicit argument; inside, re-install it as context and run the function;
return what the context gained as an extra output; outside again, write it back.
`plumb_and_transform` is that pattern with user-supplied callbacks; `effax.handle`
(`_callpath`) is the same pattern over the handler protocol.
"""

from __future__ import annotations

import functools as ft
import inspect
import types
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from typing import Any, ParamSpec, TypeVar, overload

import jax
import numpy as np

from . import _trace
from ._arguments import check_callable
from ._errors import EffectTypeError, EffectUsageError

__all__ = [
    "Transform",
    "apply_transform",
    "box",
    "normalize_transform",
    "plumb_and_transform",
    "traces_numbers",
]

P = ParamSpec("P")
R = TypeVar("R")

Transform = Callable[[Callable[..., Any]], Callable[..., Any]]

_ARGNUM_KEYWORDS = ("static_argnums", "donate_argnums")


# --- applying a transformation to the wrapper ---------------------------------------


def _shift_argnums(argnums: int | Sequence[int] | None, n: int) -> int | tuple[int, ...] | None:
    if argnums is None:
        return None
    if isinstance(argnums, int):
        return argnums + n if argnums >= 0 else argnums
    return tuple(i + n if i >= 0 else i for i in argnums)


def normalize_transform(transform: Transform) -> Transform:
    """`transform` with its options where effax can read them: ``jax.jit(**options)``
    (a decorator whose options JAX keeps in a closure) becomes
    ``functools.partial(jax.jit, **options)``."""
    options = _trace.jit_factory_options(transform)
    if options is None:
        return transform
    return ft.partial(jax.jit, **options) if options else jax.jit


def apply_transform(
    transform: Transform,
    wrapper: Callable[..., Any],
    fn: Callable[..., Any],
    out_shardings: Callable[[Any], Any],
    n_extra: int = 1,
    *,
    donate: Sequence[int] = (),
) -> Callable[..., Any]:
    """Apply `transform` to `wrapper(*extra, *args, **kwargs)`, which wraps `fn`.

    `wrapper` gets `fn`'s signature with `n_extra` positional-only parameters
    prepended, so transformations that read signatures (``jax.jit``'s
    `static_argnames`) see `fn`'s parameters. Options given through
    ``functools.partial(jax.jit, ...)`` refer to `fn`'s parameters and outputs and
    are adapted here: `static_argnums` and `donate_argnums` are shifted past the
    extra arguments, a tuple of `in_shardings` gets unspecified entries for them (so
    plumbed arrays keep their own shardings), and `out_shardings` is mapped by
    `out_shardings(...)` onto the wrapper's outputs. `donate` are extra arguments
    to donate (``donate_argnums``); the transformation must then be ``jax.jit``.
    """
    try:
        sig = inspect.signature(fn)
        extra = [
            inspect.Parameter(f"_effax_plumbed_{i}", inspect.Parameter.POSITIONAL_ONLY)
            for i in range(n_extra)
        ]
        params = [*extra, *sig.parameters.values()]
        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        pass
    # JAX names the function it traces (in its errors) after what `__wrapped__`
    # leads to: `fn`'s name and code, without holding `fn` (a compiled program
    # must not keep its function alive).
    name = getattr(fn, "__name__", None)
    if isinstance(name, str):  # also the name of the lowered module (`jit_<name>`)
        wrapper.__name__ = wrapper.__qualname__ = name
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is not None:
        name = getattr(fn, "__name__", code.co_name)
        wrapper.__wrapped__ = types.SimpleNamespace(__code__=code, __name__=name)  # type: ignore[attr-defined]
    transform = normalize_transform(transform)
    if isinstance(transform, ft.partial) and transform.keywords:
        keywords = dict(transform.keywords)
        for name in _ARGNUM_KEYWORDS:
            if name in keywords:
                keywords[name] = _shift_argnums(keywords[name], n_extra)
        in_shardings = keywords.get("in_shardings")
        if in_shardings is not None and not isinstance(in_shardings, (tuple, list)):
            # one sharding for every positional argument of `fn`, not the plumbed ones
            in_shardings = (in_shardings,) * _positional_count(fn)
        if isinstance(in_shardings, (tuple, list)):
            keywords["in_shardings"] = (*[None] * n_extra, *in_shardings)
        if keywords.get("out_shardings") is not None:
            keywords["out_shardings"] = out_shardings(keywords["out_shardings"])
        transform = ft.partial(transform.func, *transform.args, **keywords)
    if donate:
        transform = _donating(transform, donate)
    transformed = transform(wrapper)
    if not callable(transformed):
        raise EffectTypeError(
            f"transform_to_apply must return a callable, but {transform!r} returned "
            f"{type(transformed).__name__}."
        )
    return transformed


# Transformations that trace a Python number argument as a (weakly typed) array, as
# ``jax.jit`` does; others (``eqx.filter_jit``, ``nnx.jit``) may hold it static.
_TRACE_NUMBERS = (jax.jit, jax.checkpoint, jax.eval_shape)


def traces_numbers(transform: Transform) -> bool:
    """Whether `transform` traces Python numbers passed to the function it makes
    (``jax.jit``, ``jax.checkpoint``, ``jax.eval_shape`` and partials of them);
    others may treat them as static, compiling anew for every value."""
    transform = normalize_transform(transform)
    if isinstance(transform, ft.partial):
        transform = transform.func
    return any(transform is t for t in _TRACE_NUMBERS)


def box(value: Any) -> Any:
    """`value`, a NumPy scalar if it is a Python number: how a plumbed input
    crosses a transformation that does not trace Python numbers (`traces_numbers`).
    (A Python number is cheaper for ``jax.jit``, whose C++ dispatch takes it on
    its fast path.)"""
    kind = type(value)
    if kind is int:
        return np.int32(value)
    if kind is float:
        return np.float32(value)
    if kind is bool:
        return np.bool_(value)
    if kind is complex:
        return np.complex64(value)
    return value


def _donating(transform: Transform, donate: Sequence[int]) -> Transform:
    """`transform` (``jax.jit`` or a partial of it) also donating the arguments at
    the positions `donate`."""
    if transform is jax.jit:
        transform = ft.partial(jax.jit)
    if not isinstance(transform, ft.partial) or transform.func is not jax.jit:
        raise EffectUsageError(
            "donate_state=True donates the plumbed states' buffers to a jax.jit call, so "
            f"the transformation must be jax.jit (or a partial of it), not {transform!r}."
        )
    keywords = dict(transform.keywords)
    own = keywords.get("donate_argnums", ())
    own = (own,) if isinstance(own, int) else tuple(own)
    keywords["donate_argnums"] = (*own, *donate)
    return ft.partial(jax.jit, *transform.args, **keywords)


def _positional_count(fn: Callable[..., Any]) -> int:
    """How many positional parameters `fn` has (for a single `in_shardings`)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        params = None
    kinds = [p.kind for p in params] if params is not None else None
    if kinds is None or inspect.Parameter.VAR_POSITIONAL in kinds:
        raise EffectTypeError(
            "in_shardings given as one sharding applies to every positional argument, but "
            f"effax cannot count those of {getattr(fn, '__qualname__', fn)!r} (it takes "
            "*args, or has no signature). Give in_shardings as a tuple with one entry per "
            "positional argument."
        )
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(kind in positional for kind in kinds)


# --- plumb_and_transform -----------------------------------------------------------


@overload
def plumb_and_transform(
    callable_to_transform: None = None,
    *,
    transform_to_apply: Transform,
    compute_extra_input_before: Callable[[], Any],
    create_context_managers_after: Callable[[Any], Iterable[Any]],
    compute_extra_output_inside: Callable[[], Any] | None = None,
    receive_extra_output_after: Callable[[Any], None] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
@overload
def plumb_and_transform(
    callable_to_transform: Callable[P, R],
    *,
    transform_to_apply: Transform,
    compute_extra_input_before: Callable[[], Any],
    create_context_managers_after: Callable[[Any], Iterable[Any]],
    compute_extra_output_inside: Callable[[], Any] | None = None,
    receive_extra_output_after: Callable[[Any], None] | None = None,
) -> Callable[P, R]: ...
def plumb_and_transform(
    callable_to_transform: Callable[P, R] | None = None,
    *,
    transform_to_apply: Transform,
    compute_extra_input_before: Callable[[], Any],
    create_context_managers_after: Callable[[Any], Iterable[Any]],
    compute_extra_output_inside: Callable[[], Any] | None = None,
    receive_extra_output_after: Callable[[Any], None] | None = None,
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """Transform a function that reads context, plumbing the context in (and out).

    Each call of the returned function:

    1. calls `compute_extra_input_before()` outside the transformation (e.g. reads a
       context variable) to get an *extra input*, a pytree;
    2. calls the transformed wrapper with the extra input as an explicit argument;
       inside, the wrapper enters the context managers returned by
       `create_context_managers_after(extra_input)` and calls the function;
    3. if `compute_extra_output_inside` is given, calls it inside (after the function
       returned, with the context managers still entered) and returns its result as
       an *extra output* alongside the function's result;
    4. outside again, hands the extra output to `receive_extra_output_after`.

    **Arguments:**

    - `callable_to_transform`: the function; omit it to use this as a decorator.
    - `transform_to_apply`: e.g. ``jax.jit``, ``functools.partial(jax.jit,
      static_argnums=...)`` (indices refer to the function's own parameters), or
      ``jax.checkpoint``.
    - `compute_extra_input_before`: ``() -> extra_input``.
    - `create_context_managers_after`: ``extra_input -> iterable of context managers``.
    - `compute_extra_output_inside`: ``() -> extra_output``, optional.
    - `receive_extra_output_after`: ``extra_output -> None``; required with
      `compute_extra_output_inside`.

    **Returns:** a function with the same signature as `callable_to_transform`.

    **Example:**

    >>> import jax, jax.numpy as jnp, effax
    >>> x_var = effax.JitAwareContextVar[jax.Array]("x")
    >>> @effax.plumb_and_transform(
    ...     transform_to_apply=jax.jit,
    ...     compute_extra_input_before=x_var.get,
    ...     create_context_managers_after=lambda x: [x_var.set_on_enter(x)],
    ... )
    ... def log_x():
    ...     return jnp.log(x_var.get())
    >>> with x_var.set_on_enter(jnp.e):
    ...     float(log_x())
    1.0

    """
    if callable_to_transform is None:
        return ft.partial(  # type: ignore[return-value]
            plumb_and_transform,
            transform_to_apply=transform_to_apply,
            compute_extra_input_before=compute_extra_input_before,
            create_context_managers_after=create_context_managers_after,
            compute_extra_output_inside=compute_extra_output_inside,
            receive_extra_output_after=receive_extra_output_after,
        )
    fn = callable_to_transform
    check_callable(fn, "callable_to_transform")
    check_callable(transform_to_apply, "transform_to_apply")
    check_callable(compute_extra_input_before, "compute_extra_input_before")
    check_callable(create_context_managers_after, "create_context_managers_after")
    if (compute_extra_output_inside is None) != (receive_extra_output_after is None):
        raise EffectTypeError(
            "compute_extra_output_inside and receive_extra_output_after go together: "
            "pass both to plumb a value out, or neither."
        )
    if compute_extra_output_inside is not None:
        check_callable(compute_extra_output_inside, "compute_extra_output_inside")
        check_callable(receive_extra_output_after, "receive_extra_output_after")

    def wrapper(extra_input: Any, /, *args: Any, **kwargs: Any) -> Any:
        managers = create_context_managers_after(extra_input)
        try:
            managers = list(managers)
        except TypeError:
            raise EffectTypeError(
                "create_context_managers_after must return an iterable of context "
                f"managers, but returned {type(managers).__name__}."
            ) from None
        with ExitStack() as stack:
            for manager in managers:
                if not (hasattr(manager, "__enter__") and hasattr(manager, "__exit__")):
                    raise EffectTypeError(
                        "create_context_managers_after must return context managers, but "
                        f"one item is a {type(manager).__name__}: {manager!r}."
                    )
                stack.enter_context(manager)
            out = fn(*args, **kwargs)
            if compute_extra_output_inside is None:
                return out
            return out, compute_extra_output_inside()

    transformed = apply_transform(
        transform_to_apply,
        wrapper,
        fn,
        out_shardings=(lambda o: o)
        if compute_extra_output_inside is None
        else (lambda o: (o, None)),
    )

    @ft.wraps(fn)
    def plumbed(*args: Any, **kwargs: Any) -> Any:
        result = transformed(compute_extra_input_before(), *args, **kwargs)
        if receive_extra_output_after is None:
            return result
        out, extra_output = result
        receive_extra_output_after(extra_output)
        return out

    return plumbed

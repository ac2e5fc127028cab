"""`JitAwareContextVar`: a context variable that refuses to be read across a jit
boundary.

Built on :mod:`contextvars` (so each thread and each asyncio task sees its own
values), it records the JAX trace that was current when a value was installed. A
read from under a staging trace (``jax.jit``, a ``lax.scan`` body, ...) that the
value was installed outside of raises instead of returning a value that JAX would
bake into its cache as a constant.
"""

from __future__ import annotations

import contextvars
from typing import Any, Generic, TypeVar

from . import _trace
from ._errors import EffectTypeError

__all__ = ["JitAwareContextVar"]

T = TypeVar("T")

_JIT_BOUNDARY = (
    "The value found for {var!r} was assigned behind a jit-transform boundary "
    "({where}). It cannot be accessed in the current context: pass it into the "
    "transformed function explicitly (see effax.plumb_and_transform), or set it "
    "inside."
)


class JitAwareContextVar(Generic[T]):
    """A :class:`contextvars.ContextVar` that refuses to be read across a jit boundary.

    ``set_on_enter(value)`` returns a context manager that installs ``value`` for the
    duration of a ``with`` block and records the JAX trace current at entry.
    ``get()`` returns the innermost value, unless a *staging* trace (``jax.jit``,
    ``pmap``, ``shard_map``, a ``lax`` control-flow body, ``jax.checkpoint``,
    ``jax.eval_shape``, ``jax.make_jaxpr``) lies between that trace and the current
    one: then the value would become a stale constant of a cached trace, and ``get()``
    raises :class:`LookupError` instead. ``grad``, ``jvp``, ``vjp``, ``linearize`` and
    ``vmap`` re-run Python on every call, so values pass through them.

    Create context variables at module level (or as class attributes), never in a
    loop or closure: like the stdlib's, they are never garbage collected.

    **Arguments:**

    - `name`: shown in messages and in the ``repr``.

    **Example:**

    >>> import jax, jax.numpy as jnp, effax
    >>> x_var = effax.JitAwareContextVar[float]("x")
    >>> def log_x():
    ...     return jnp.log(x_var.get())
    >>> @jax.jit
    ... def pure(x):
    ...     with x_var.set_on_enter(x):
    ...         return log_x() ** 2
    >>> float(pure(jnp.e))
    1.0

    """

    __slots__ = ("_name", "_var")

    def __init__(self, name: str = "JitAwareContextVar") -> None:
        if not isinstance(name, str):
            raise EffectTypeError(
                f"effax.JitAwareContextVar(name) takes a str, but got {type(name).__name__}."
            )
        self._name = name
        self._var: contextvars.ContextVar[tuple[T, _trace.TraceRef]] = contextvars.ContextVar(
            f"effax.{name}"
        )

    def __repr__(self) -> str:
        return f"<JitAwareContextVar {self._name!r} at {id(self):#x}>"

    def get(self) -> T:
        """The innermost value; raises `LookupError` if none is set or it is stale."""
        try:
            value, ref = self._var.get()
        except LookupError:
            raise LookupError(f"No value found for {self!r}.") from None
        if ref is not _trace.current_trace_ref():
            reach = _trace.reachability(ref)
            if reach != "ok":
                where = (
                    "a staging trace lies between where it was set and here"
                    if reach == "staged"
                    else "the trace where it was set is not an ancestor of this one"
                )
                raise LookupError(_JIT_BOUNDARY.format(var=self, where=where))
        return value

    def set_on_enter(self, value: T) -> _SetOnEnter[T]:
        """A context manager that installs `value` while its ``with`` block runs."""
        return _SetOnEnter(self._var, value)


class _SetOnEnter(Generic[T]):
    __slots__ = ("_token", "_value", "_var")

    def __init__(self, var: contextvars.ContextVar[tuple[T, Any]], value: T) -> None:
        self._var = var
        self._value = value
        self._token: contextvars.Token[tuple[T, Any]] | None = None

    def __enter__(self) -> T:
        if self._token is not None:
            raise RuntimeError("set_on_enter(...) context managers cannot be re-entered.")
        self._token = self._var.set((self._value, _trace.current_trace_ref()))
        return self._value

    def __exit__(self, *exc_info: object) -> None:
        assert self._token is not None
        self._var.reset(self._token)
        self._token = None

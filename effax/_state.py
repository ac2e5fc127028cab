"""`State`: mutable state, and `StateCell`, its handler."""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Any, Generic, TypeVar

import attrs

from . import _trace
from ._arguments import check_unleaked
from ._context import here, run_at, run_where
from ._effect import Effect
from ._protocol import BatchPolicy, Export, Fields, Handler, PyTree

__all__ = ["State", "StateCell"]

S = TypeVar("S")


def _modify(handler: Any, fn: Callable[[Any], Any]) -> Any:
    """`modify` as a `get` and a `set` of `handler` (see `State.derived_operations`)."""
    new = fn(handler.get())
    handler.set(new)
    return new


class State(Effect["StateCell[S]"], Generic[S]):
    """Mutable state, kept by a cell handler and threaded through traced regions.

    Across ``jax.jit`` the current value goes in and the final value comes out; in an
    ``effax.scan`` it is part of the carry. Its structure, shapes and dtypes must stay
    the same across a traced boundary (else :class:`effax.StateTypeError`).

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> steps = effax.State[jnp.ndarray]("steps")
    >>> with steps.init(jnp.int32(0)) as cell:
    ...     n = steps.modify(lambda n: n + 1)
    ...     steps.set(steps.get() * 10)
    >>> int(cell.value)
    10

    """

    __slots__ = ()

    handler_hint = "{name}.init(value)"
    operations = ("get", "set", "modify")
    # An interceptor that does not answer `modify` answers it as a `get` and a
    # `set` (its own, if it answers those): casting reads and writes casts both.
    derived_operations = MappingProxyType({"modify": _modify})

    @_trace.api_boundary
    def get(self) -> S:
        """The current value."""
        handler = self.handler()
        return handler.get() if handler._effax_own else run_where(self, handler, handler.get)

    @_trace.api_boundary
    def set(self, value: S) -> None:
        """Replace the current value."""
        handler = self.handler()
        if handler._effax_own:
            handler.set(value)
        else:
            run_where(self, handler, handler.set, value)

    @_trace.api_boundary
    def modify(self, fn: Callable[[S], S]) -> S:
        """Replace the value by `fn(value)` and return the new value."""
        handler = self.handler()
        # `fn` is the performer's code: it runs under the performer's handlers
        return run_at(self, handler, handler.modify, here(fn))

    def init(self, value: S) -> StateCell[S]:
        """A cell handler holding `value`; it keeps its value across calls."""
        check_unleaked(value, "its value", f"{self!r}.init(...)")
        return StateCell(self, value)


@attrs.define(eq=False)
class StateCell(Handler[State[S]]):
    """The handler of a :class:`State`: a cell whose `.value` is the current state.

    Made by `State.init`. The cell keeps its value after its scope ends, so
    installing it again continues from there.

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> steps = effax.State[jnp.ndarray]("steps")
    >>> cell = steps.init(jnp.int32(0))
    >>> @effax.jit
    ... def bump():
    ...     steps.set(steps.get() + 1)
    >>> for _ in range(2):
    ...     with cell:
    ...         bump()
    >>> int(cell.value)
    2

    """

    effect: State[S]
    value: S
    fields = Fields(carry="value")

    # The operations of `State`, answered by the cell (an interceptor may answer
    # them differently, see `effax.intercept`).
    def get(self) -> S:
        return self.value

    def set(self, value: S) -> None:
        self.effect.check_store(self, value, "set")
        self.value = value

    def modify(self, fn: Callable[[S], S]) -> S:
        new = fn(self.value)
        self.set(new)
        return new

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: PyTree, carry: PyTree) -> StateCell[S]:
        return cls(effect, carry)

    def batch_export(self, policy: BatchPolicy) -> tuple[Export, int | None]:
        return self.export(), 0 if policy.state == "batched" else None

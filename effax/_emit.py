"""`Emit`: a writer effect, and `Collector`, its handler."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import attrs

from ._effect import Effect
from ._protocol import Fields, Handler, PyTree

__all__ = ["Collector", "Emit"]

T = TypeVar("T")


class Emit(Effect["Collector[T]"], Generic[T]):
    """A writer: library code emits values, the handler collects them in order.

    Values emitted inside a compiled function come out as its outputs; inside an
    ``effax.scan`` each emit site's values are stacked along a new leading axis.

    **Example:**

    >>> import effax
    >>> log = effax.Emit[int]("log")
    >>> with log.collect() as collected:
    ...     log.emit(1)
    ...     log.emit(2)
    >>> collected.values
    [1, 2]

    """

    __slots__ = ()

    handler_hint = "{name}.collect()"

    def emit(self, value: T) -> None:
        """Append `value` to the innermost collector."""
        self.handler_for_write(value).values.append(value)

    def collect(self) -> Collector[T]:
        """A handler collecting the emitted values in `.values`."""
        return Collector(self)


@attrs.define(eq=False)
class Collector(Handler[Emit[T]]):
    """The handler of an :class:`Emit`: `.values` lists what was emitted, in order.

    Made by `Emit.collect`. Values emitted in an `effax.scan` body come back stacked
    along a new leading axis, one entry per emit site.

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> loss = effax.Emit[jnp.ndarray]("loss")
    >>> with loss.collect() as collector:
    ...     loss.emit(jnp.float32(1))
    ...     _ = effax.scan(lambda c, x: (c, loss.emit(x)), 0, jnp.arange(3.0))
    >>> len(collector.values), collector.values[1].shape
    (2, (3,))

    """

    effect: Emit[T]
    values: list[T] = attrs.field(factory=list)

    fields = Fields(values="values")

    @property
    def value(self) -> list[T]:
        return self.values

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: PyTree, carry: PyTree) -> Collector[T]:
        return cls(effect)

"""`Emit`: a writer effect, and its handlers: `Collector`, which keeps what is
emitted, and `Discarder`, which drops it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import attrs
import jax
import jax.numpy as jnp

from . import _trace
from ._context import run_where
from ._effect import Effect
from ._errors import EffectUsageError
from ._protocol import Fields, Handler, PyTree

__all__ = ["Collector", "Discarder", "Emit"]

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
    operations = ("emit",)

    def unhandled_hint(self) -> str:
        return (
            f" Where the values are not wanted (at evaluation time), "
            f"`{self.variable_name()}.discard()` drops them."
        )

    @_trace.api_boundary
    def emit(self, value: T) -> None:
        """Append `value` to the innermost collector."""
        handler = self.handler()
        if handler._effax_own:
            handler.emit(value)
        else:
            run_where(self, handler, handler.emit, value)

    def collect(self) -> Collector[T]:
        """A handler collecting the emitted values in `.values`."""
        return Collector(self)

    def discard(self) -> Discarder[T]:
        """A handler dropping the emitted values: a compiled function emits nothing
        (no extra outputs), as if the emit sites were not there."""
        return Discarder(self)


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

    def emit(self, value: T) -> None:
        """The operation of `Emit`: append `value` to `.values`."""
        self.effect.check_store(self, value, "emit")
        self.values.append(value)

    def clear(self) -> None:
        """Forget the values collected so far (e.g. after logging them)."""
        self.values.clear()

    def take(self) -> list[T]:
        """The values collected so far, forgetting them: a collector installed once
        around a training loop gives each step's values with ``take()`` after it.

        **Example:**

        >>> import effax
        >>> log = effax.Emit[int]("log")
        >>> with log.collect() as collector:
        ...     for step in range(2):
        ...         log.emit(step)
        ...         log.emit(10 * step)
        ...         print(collector.take())
        [0, 0]
        [1, 10]

        """
        values = list(self.values)
        self.values.clear()
        return values

    def stacked(self) -> Any:
        """The values collected so far as one pytree, stacked along a new leading
        axis: values of one structure stack leaf by leaf; dicts with different keys
        (e.g. one key per emit site) merge into one dict, each key stacking the
        values that have it. (Values emitted in an `effax.scan` are already stacked
        per step: each is one entry here.) Refuses values of different structures.

        **Example:**

        >>> import jax.numpy as jnp, effax
        >>> metrics = effax.Emit[dict]("metrics")
        >>> with metrics.collect() as collector:
        ...     metrics.emit({"loss": jnp.float32(1)})
        ...     metrics.emit({"loss": jnp.float32(0.5), "acc": jnp.float32(0.75)})
        >>> {k: v.tolist() for k, v in collector.stacked().items()}
        {'loss': [1.0, 0.5], 'acc': [0.75]}

        """
        return _stack(self.effect, self.values)

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: PyTree, carry: PyTree) -> Collector[T]:
        return cls(effect)


def _stack(effect: Emit[Any], values: list[Any]) -> Any:
    """`Collector.stacked` of `values`, emitted to `effect`."""
    if not values:
        raise EffectUsageError(
            f"{effect!r} collected no values, so there is nothing to stack (the "
            "structure of a stack of none is unknown)."
        )
    if all(isinstance(v, Mapping) for v in values):
        keys = list(dict.fromkeys(k for v in values for k in v))
        return {k: _stack(effect, [v[k] for v in values if k in v]) for k in keys}
    structures = {jax.tree.structure(v) for v in values}
    if len(structures) > 1:
        raise EffectUsageError(
            f"{effect!r} collected values of different structures ("
            + ", ".join(sorted(map(str, structures)))
            + "), which do not stack into one array per leaf. Stack each kind "
            "separately, or emit one structure (dicts with different keys merge)."
        )
    for column in zip(*map(jax.tree.leaves, values), strict=True):
        shapes = list(dict.fromkeys(tuple(jnp.shape(leaf)) for leaf in column))
        if len(shapes) > 1:
            raise EffectUsageError(
                f"{effect!r} collected values of shapes "
                + " and ".join(map(str, shapes))
                + ", which do not stack into one array along a new leading axis. Emit "
                "values of one shape (pad them, or emit each shape to an effect of its "
                "own), or read the collector's .values."
            )
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *values)


@attrs.define(eq=False)
class Discarder(Handler[Emit[T]]):
    """The handler of an :class:`Emit` that drops what is emitted.

    Made by `Emit.discard`. Nothing crosses a traced boundary (its `fields` are
    empty), so a compiled function under it has no outputs for the emits.

    **Example:**

    >>> import jax, jax.numpy as jnp, effax
    >>> debug = effax.Emit[jnp.ndarray]("debug")
    >>> def f(x):
    ...     debug.emit(x * 2)
    ...     return x + 1
    >>> with debug.discard() as dropped:
    ...     y = effax.jit(f)(1.0)
    >>> float(y), dropped.value
    (2.0, [])

    """

    effect: Emit[T]
    fields = Fields()

    def emit(self, value: T) -> None:
        """The operation of `Emit`: drop `value`."""

    @property
    def value(self) -> list[T]:
        return []

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: PyTree, carry: PyTree) -> Discarder[T]:
        return cls(effect)

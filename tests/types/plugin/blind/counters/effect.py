"""Two user-defined effects and their handlers."""

from __future__ import annotations

from typing import Any, cast

import attrs
import jax
import jax.numpy as jnp

import effax as fx


class Counter(fx.Effect["Tally"]):
    """Counts events; the tally is an int32 array carried through traced regions."""

    def tick(self, by: int | jax.Array = 1) -> None:
        tally = self.handler()
        tally.count = tally.count + by

    def tally(self) -> Tally:
        return Tally(self)


@attrs.define(eq=False)
class Tally(fx.Handler[Counter]):
    effect: Counter
    count: jax.Array = attrs.field(factory=lambda: jnp.int32(0))
    fields = fx.Fields(carry="count")

    @property
    def value(self) -> jax.Array:
        return self.count

    @classmethod
    def rebuild(cls, effect: Counter, static: Any, const: Any, carry: jax.Array) -> Tally:
        return cls(effect, carry)


class Visited(fx.Effect["Visits"]):
    """Records layer names known at trace time."""

    def visit(self, layer_name: str) -> None:
        self.handler().names.append(layer_name)

    def record(self) -> Visits:
        return Visits(self)


@attrs.define(eq=False)
class Visits(fx.Handler[Visited]):
    effect: Visited
    names: list[str] = attrs.field(factory=list)

    @property
    def value(self) -> list[str]:
        return self.names

    def export(self) -> fx.Export:
        return fx.Export()

    @classmethod
    def rebuild(cls, effect: Visited, static: Any, const: Any, carry: Any) -> Visits:
        return cls(effect)

    def outcome(self, *, carry_required: bool) -> fx.Outcome:
        return fx.Outcome(static=tuple(self.names))

    def absorb(self, outcome: fx.Outcome, *, steps: int | None) -> None:
        if steps is None:
            raise ValueError("Visited cannot be recorded in a loop of unknown length")
        names = cast("tuple[str, ...]", outcome.static)
        self.names.extend(list(names) * steps)


events = Counter("events")
visited = Visited("visited")


@fx.uses(events)
def work(x: jax.Array) -> jax.Array:
    events.tick()
    return fx.cond(x > 0, lambda: x * 2, lambda: x)


@fx.uses(events, visited)
def encoder(x: jax.Array) -> jax.Array:
    visited.visit("encoder")
    return jnp.tanh(work(x))


fast_work = fx.jit(work)

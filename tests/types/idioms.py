"""Checked by mypy and by pyright (tests/test_typing.py), never run.

Idioms of the docs and the examples that mypy --strict or pyright once refused
because of effax's own annotations, and the forms the docs teach where a checker
cannot follow an idiom; each `assert_type` pins a type both checkers infer. An
expected error is pinned for each checker on its own: `# type: ignore[code]` for
mypy (run with --warn-unused-ignores), `# pyright: ignore[rule]` for pyright
(`reportUnnecessaryTypeIgnoreComment`), so one that goes away fails the check.
"""

from __future__ import annotations

from typing import Any

import attrs
import jax
import jax.numpy as jnp
from typing_extensions import assert_type

import effax as fx

# --- a handler's `fields`: a class attribute (docs/howto/custom-effects.md) or a
# property (one per instance, as `Ask`'s provider has); pyright refused the class
# attribute over `Handler.fields`, a property, and mypy a property over an attribute


class Counter(fx.Effect["Tally"]):
    def __init__(self, name: str) -> None:
        self.name = name

    def tick(self) -> None:
        self.handler().add(1)


@attrs.define(eq=False)
class Tally(fx.Handler[Counter]):
    effect: Counter
    count: jax.Array = attrs.field(factory=lambda: jnp.int32(0))
    fields = fx.Fields(carry="count")

    def add(self, n: int) -> None:
        self.count = self.count + n

    @property
    def value(self) -> jax.Array:
        return self.count

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: Any, carry: Any) -> Tally:
        return cls(effect, carry)


@attrs.define(eq=False)
class Switchable(fx.Handler[Counter]):
    effect: Counter
    count: jax.Array
    traced: bool

    @property
    def fields(self) -> fx.Fields:
        return fx.Fields(carry="count") if self.traced else fx.Fields(static="count")

    @property
    def value(self) -> jax.Array:
        return self.count

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: Any, carry: Any) -> Switchable:
        return cls(effect, carry, True)


events = Counter("events")
assert_type(Tally(events).fields, fx.Fields)
assert_type(Switchable(events, jnp.int32(0), True).fields, fx.Fields)
assert_type(fx.State[int]("n").init(0).fields, fx.Fields)


# --- an outcome's static part is what the handler's own `outcome` sent: a tuple of
# names here (it was typed Hashable, so `list(outcome.static)` was refused)


class Visited(fx.Effect["Visits"]):
    def __init__(self, name: str) -> None:
        self.name = name


@attrs.define(eq=False)
class Visits(fx.Handler[Visited]):
    effect: Visited
    names: list[str] = attrs.field(factory=list)

    @property
    def value(self) -> list[str]:
        return self.names

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: Any, carry: Any) -> Visits:
        return cls(effect)

    def outcome(self, *, carry_required: bool) -> fx.Outcome:
        return fx.Outcome(static=tuple(self.names))

    def absorb(self, outcome: fx.Outcome, *, steps: int | None) -> None:
        self.names.extend(list(outcome.static) * (steps or 1))


# --- `outer()` is typed as the handler `effect.handler()` returns (it was a bare
# `Handler[Any]`, without the effect's operations); a handler class constructs its
# own type (`Handler.__new__` said Any, which pyright took for the instance's type)


class Doubled(fx.Interceptor[Counter]):
    def add(self, n: int) -> None:
        self.outer().add(2 * n)


class Untyped(fx.Interceptor):  # type: ignore[type-arg]
    def add(self, n: int) -> None:
        self.outer().add(n)  # an interceptor of any effect: whatever `outer()` has


assert_type(Doubled(events, ()), Doubled)
assert_type(Doubled(events, ()).outer(), Tally)
assert_type(fx.intercept(events).outer(), Tally)
assert_type(Tally(events).outer(), Tally)
assert_type(fx.State[int]("n").init(0).outer(), fx.StateCell[int])
assert_type(fx.Emit[float]("log").collect().outer(), fx.Collector[float])
Doubled(events, ()).outer().subtract(1)  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue]

# --- effect operations inside expressions (a lambda body): they return None

steps = fx.State[jax.Array]("steps")
with steps.init(jnp.zeros(())):
    assert_type(steps.set(jnp.ones(())), None)
    assert_type(fx.cond(True, lambda: (steps.set(jnp.ones(())), 1.0)[1], lambda: 2.0), float)

# --- the loops keep their carry's type; a carry the body turns into an array
# starts as one (`jnp.asarray(0.0)`): as a Python float, mypy holds the body to
# returning a float (pyright reads the carry as `float | Array`)

limit = fx.Ask[jax.Array]("limit")
pair = (jnp.ones(3), str(limit))
with limit.provide(jnp.float32(10)), fx.rng.seed(0), steps.init(jnp.zeros(())):
    x = fx.while_loop(
        lambda x: x < limit.ask(), lambda x: x + fx.random.uniform(), jnp.asarray(0.0)
    )
    assert_type(x, jax.Array)
    assert_type(fx.while_loop(lambda c: c < 3, lambda c: c + 1, 0), int)
    assert_type(
        fx.fori_loop(0, 4, lambda i, c: (steps.set(steps.get() + i), c)[1], 0.0), float
    )
    assert_type(fx.fori_loop(0, 4, lambda i, c: c * 2, jnp.ones(3)), jax.Array)
    assert_type(
        fx.scan(lambda c, x: (c + x, x * 2), jnp.zeros(()), jnp.arange(3.0)),
        tuple[jax.Array, jax.Array],
    )
    assert_type(fx.fori_loop(0, 4, lambda i, c: (c[0] + 1, c[1]), pair), tuple[jax.Array, str])
    fx.while_loop(
        lambda x: x < limit.ask(),
        lambda x: x + fx.random.uniform(),  # type: ignore[arg-type, return-value]
        0.0,
    )

# --- several handlers in one list: mypy joins a `StateCell` and a `Provider` to
# `object`, so the list (or tuple) says what it holds

cells: list[fx.Handler[Any]] = [steps.init(jnp.zeros(())), limit.provide(jnp.ones(()))]
with fx.handlers(*cells) as hs:
    assert_type(hs[steps], jax.Array)
bundle = (steps.init(jnp.zeros(())), limit.provide(jnp.ones(())))
with fx.handlers(*bundle):
    pass
mixed = [steps.init(jnp.zeros(())), limit.provide(jnp.ones(()))]
with fx.handlers(*mixed):  # type: ignore[arg-type]
    pass


# --- `effax.intercept`'s functions get their arguments' types from the effect's
# kind (`outer` is the handler its `handler()` returns), which pyright's strict
# mode refused as unknown; mypy infers a lambda's parameters in a call of an
# overloaded function as `Any` (each `assert_type` pinned for it)

log = fx.Emit[float]("log")
lr = fx.Ask[float]("lr")
weights = fx.State[jax.Array]("weights")
bn = fx.StateDict[jax.Array]("bn")
acts = fx.Tap[jax.Array]("acts")
fx.intercept(log, emit=lambda outer, v: outer.emit(assert_type(v, float) * 2))  # type: ignore[assert-type]
fx.intercept(lr, ask=lambda outer: assert_type(outer, fx.Provider[float]).ask())  # type: ignore[assert-type]
fx.intercept(weights, set=lambda outer, v: outer.set(assert_type(v, jax.Array)))  # type: ignore[assert-type]
fx.intercept(bn, set=lambda outer, name, v: outer.set(assert_type(name, str), v))  # type: ignore[assert-type]
fx.intercept(bn, get=lambda outer, name, init=None: outer.get(name, init) * 2)
fx.intercept(acts, tap=lambda outer, site, x: outer.tap(site, assert_type(x, jax.Array)))  # type: ignore[assert-type]
fx.intercept(fx.rng, next_key=lambda outer: jax.random.fold_in(outer.next_key(), 1))
fx.intercept(events, tick=lambda outer: outer.count)  # another effect: any operation

"""Rule 1: taps (`effax.Tap`): `acts.tap(site, x)` performs `acts`, and
`acts.ignore()`, `acts.record(...)`, `acts.replace(...)`, `acts.gradients(...)`
handle it; an interceptor of a tap handles nothing by itself."""

import jax
import jax.numpy as jnp
from mylib import temperature

import effax as fx

acts = fx.Tap[jax.Array]("acts")
grads = fx.Tap[jax.Array]("grads")

RECORDER = acts.record("hidden")
doubled = fx.intercept(acts, tap=lambda outer, site, v: outer.tap(site, 2 * v))


@fx.uses(acts)
def tapped(x: jax.Array) -> jax.Array:
    h = acts.tap("hidden", x * 2)
    return acts.tap("out", h + 1)


# case: a tap with no handler and an empty row
@fx.uses()
def unhandled(x: jax.Array) -> jax.Array:
    # the message, pinned: Effect "acts" is neither in the effect row of "unhandled"
    # (effax.uses()) nor handled by an enclosing "with"
    return acts.tap("hidden", x)  # E: effax-undeclared: of "unhandled" (effax.uses()) nor


# case: a tap outside the declared row
@fx.uses(temperature, grads)
def outside_the_row(x: jax.Array) -> jax.Array:
    y = grads.tap("scaled", x * temperature.ask())
    return acts.tap("hidden", y)  # E: effax-undeclared: Effect "acts" is neither in the effect row


# case: taps in a lambda and a nested function, and a call of a function that taps
@fx.uses(grads)
def nested_taps(x: jax.Array) -> jax.Array:
    def inner(v: jax.Array) -> jax.Array:
        return acts.tap("inner", v)

    y, _ = fx.scan(lambda c, v: (acts.tap("s", c + v), None), x, x)  # E: effax-undeclared
    return inner(y) + tapped(x)  # E: effax-undeclared, effax-undeclared


# case: a handler of another tap does not handle this one
@fx.uses()
def another_taps_handler(x: jax.Array) -> jax.Array:
    with grads.record():
        grads.tap("g", x)
        return acts.tap("hidden", x)  # E: effax-undeclared: Effect "acts" is neither


# case: a handler of another tap in a bundle, in a variable, through effax.handle
@fx.uses()
def another_taps_handlers(x: jax.Array) -> jax.Array:
    other = grads.ignore()
    with fx.handlers(grads.replace({"g": x})), other:
        tapped(x)  # E: effax-undeclared: "tapped" performs effect "acts"
        acts.tap("hidden", grads.tap("g", x))  # E: effax-undeclared: Effect "acts"
    return fx.handle(tapped, grads.gradients())(x)  # E: effax-undeclared: performs effect "acts"


# case: a tap under only an interceptor
@fx.uses()
def under_an_interceptor(x: jax.Array) -> jax.Array:
    with fx.intercept(acts, tap=lambda outer, site, v: outer.tap(site, v + 1)):
        return acts.tap("hidden", x)  # E: effax-undeclared: Effect "acts" is neither


# case: a tap under only an interceptor held in a variable
@fx.uses()
def under_a_held_interceptor(x: jax.Array) -> jax.Array:
    with doubled:
        acts.tap("hidden", x)  # E: effax-undeclared: Effect "acts"
        return tapped(x)  # E: effax-undeclared: "tapped" performs effect "acts"


# case: ignore() handles the taps
@fx.uses()
def ignored(x: jax.Array) -> jax.Array:
    with acts.ignore():
        return acts.tap("hidden", x) + tapped(x)


# case: record() handles the taps, in effax.handlers too
@fx.uses()
def recorded(x: jax.Array) -> dict[str, jax.Array]:
    with acts.record("hid*"):
        acts.tap("hidden", x)
    with fx.handlers(acts.record(), grads.record()) as hs:
        tapped(grads.tap("g", x))
    found: dict[str, jax.Array] = hs[acts]
    return found


# case: replace() handles the taps, with a mapping or a function
@fx.uses()
def replaced(x: jax.Array) -> jax.Array:
    with acts.replace({"hidden": jnp.zeros(3)}):
        y = tapped(x)
    with acts.replace(lambda site, v: v * 2):
        return acts.tap("hidden", y)


# case: gradients() handles the taps
@fx.uses()
def gradients(x: jax.Array) -> jax.Array:
    with acts.gradients("hidden"):
        g: jax.Array = fx.grad(lambda v: jnp.sum(tapped(v)))(x)
        return g


# case: a handler held in a variable, and effax.handle
@fx.uses()
def held_and_handled(x: jax.Array) -> jax.Array:
    recorder = acts.record()
    with recorder, RECORDER:
        tapped(x)
    return fx.handle(tapped, acts.ignore())(x) + fx.jit(fx.handle(tapped, acts.replace({})))(x)


# case: an interceptor over a handler of its tap, or under the row
@fx.uses(grads)
def intercepted(x: jax.Array) -> jax.Array:
    with acts.record(), doubled:
        y = tapped(x)
    with fx.handlers(grads.ignore(), fx.intercept(grads, tap=lambda o, s, v: o.tap(s, v))):
        y = grads.tap("g", y)
    with fx.intercept(grads, tap=lambda o, s, v: o.tap(s, -v)):
        return grads.tap("g", y)


# case: at module level
with acts.ignore():
    tapped(jnp.ones(3))
with RECORDER, doubled:
    acts.tap("hidden", jnp.ones(3))
with doubled:
    acts.tap("hidden", jnp.ones(3))  # E: effax-unhandled: Effect "acts" is performed at
acts.tap("hidden", jnp.ones(3))  # E: effax-unhandled
tapped(jnp.ones(3))  # E: effax-unhandled: "tapped" performs effect "acts"

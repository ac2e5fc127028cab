"""State, StateDict and running statistics in a small normalisation pipeline."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx
from b9lib.effects import bn, draws, steps, total
from b9lib.layers import RunningMean, count
from b9lib.training import bump_twice

batch = jnp.linspace(0.0, 1.0, 8).reshape(4, 2)

seen = fx.State[jax.Array]("seen")
running = fx.State[jax.Array]("running")

# case: observe a batch with two states


@fx.uses(seen, running)
def observe(xb: jax.Array, momentum: float = 0.9) -> jax.Array:
    n = seen.modify(lambda k: k + xb.shape[0])
    running.modify(lambda m: momentum * m + (1 - momentum) * jnp.mean(xb, axis=0))
    return n


with fx.handlers(seen.init(jnp.int32(0)), running.init(jnp.zeros(2))) as hs:
    for i in range(3):
        observe(batch + i)

# case: observe without the running state

with seen.init(jnp.int32(0)):
    observe(batch)  # E: effax-unhandled

# case: a stateful object compiled once

cells = seen.init(jnp.int32(0)), running.init(jnp.zeros(2))
fast_observe = fx.handle(observe, *cells, transform=jax.jit)
for i in range(3):
    fast_observe(batch * i)

# case: a partial spread leaves one state out

half_cells = (seen.init(jnp.int32(0)),)
half_observe = fx.handle(observe, *half_cells)
half_observe(batch)  # E: effax-unhandled

# case: normaliser whose row forgets a state


@fx.uses(seen)
def normalise(xb: jax.Array) -> jax.Array:
    seen.modify(lambda k: k + 1)
    return xb - running.get()  # E: effax-undeclared


with fx.handlers(seen.init(jnp.int32(0)), running.init(jnp.zeros(2))):
    normalise(batch)

# case: float state started from an int


@fx.uses(total)
def accumulate(v: float) -> float:
    total.set(total.get() + v)
    return total.get()


with total.init(0):  # E: effax-handler-type
    fx.jit(accumulate)(0.5)

# case: float state started from a float

with total.init(0.0) as tcell:
    fx.jit(accumulate)(0.5)
    accumulate(0.25)

# case: counter in a step kept in a module-level row


@fx.uses(steps)
def tick_twice() -> jax.Array:
    count()
    return count()


with steps.init(jnp.int32(0)) as scell:
    tick_twice()
    fx.jit(tick_twice)()
    bump_twice()

# case: counting steps from a function whose row is empty


@fx.uses()
def pure_counter() -> jax.Array:
    with steps.init(jnp.int32(0)) as inner:
        tick_twice()
    return inner.value


pure_counter()

# case: empty row calls a counting function unhandled


@fx.uses()
def leaky_counter() -> jax.Array:
    return tick_twice()  # E: effax-undeclared


with steps.init(jnp.int32(0)):
    leaky_counter()

# case: named running means in a StateDict


@fx.uses(bn)
def bn_layer(name: str, xb: jax.Array) -> jax.Array:
    mean = bn.get(f"{name}/mean", init=lambda: jnp.zeros(xb.shape[-1]))
    bn.set(f"{name}/mean", 0.9 * mean + 0.1 * jnp.mean(xb, axis=0))
    return xb - mean


@fx.jit
@fx.uses(bn)
def two_norms(xb: jax.Array) -> jax.Array:
    return bn_layer("second", bn_layer("first", xb))


with bn.init() as bncell:
    for _ in range(3):
        two_norms(batch)

# case: StateDict used without its cell

two_norms(batch)  # E: effax-unhandled

# case: StateDict performed outside the row


@fx.uses(steps)
def norm_and_count(xb: jax.Array) -> jax.Array:
    count()
    return bn_layer("third", xb)  # E: effax-undeclared


with steps.init(jnp.int32(0)), bn.init():
    norm_and_count(batch)

# case: a missing entry read without init


@fx.uses(bn)
def read_variance() -> jax.Array:
    return bn.get("first/var")


with bn.init({"first/mean": jnp.zeros(2)}):
    try:
        read_variance()
    except fx.EffectUsageError:
        pass

# case: per-layer states kept by the layers

layers = [RunningMean("first", 2), RunningMean("second", 2)]


@fx.jit
def forward_means(xb: jax.Array) -> jax.Array:
    for layer in layers:
        xb = layer(xb)
    return xb


with fx.handlers(*(layer.init() for layer in layers)) as lhs:
    forward_means(batch)

# case: a layer's state in an attribute, never installed

forward_means(batch)  # limit: effects held in class attributes are not tracked

# case: grad carrying state through

calls = fx.State[jax.Array]("calls")


@fx.uses(calls)
def quad(w: jax.Array) -> jax.Array:
    calls.set(calls.get() + 1)
    return jnp.sum(w**2)


with calls.init(jnp.float32(0)) as ccell:
    val, g = fx.value_and_grad(quad)(jnp.ones(2))
    g2 = fx.grad(quad)(jnp.ones(2))

# case: grad of a counted loss without the counter

quad_grad = fx.grad(quad)
quad_grad(jnp.ones(2))  # E: effax-unhandled

# case: draws state modified through a lambda stored in a variable


@fx.uses(draws)
def note_draw() -> None:
    bumper = lambda: draws.modify(lambda n: n + 1)
    bumper()  # E: no-untyped-call
    bumper()  # E: no-untyped-call


with draws.init(jnp.int32(0)):
    note_draw()

# case: nested def that touches a state outside the row


@fx.uses(draws)
def note_and_step() -> None:
    def inner() -> None:
        steps.modify(lambda n: n + 1)

    draws.modify(lambda n: n + 1)
    inner()  # E: effax-undeclared


with draws.init(jnp.int32(0)), steps.init(jnp.int32(0)):
    note_and_step()

# case: state read at module level

with steps.init(jnp.int32(5)) as sc:
    current = steps.get()
final_steps = steps.get()  # E: effax-unhandled

# case: float state in a handlers bundle started from an int

with fx.handlers(total.init(1), steps.init(jnp.int32(0))):  # E: effax-handler-type
    fx.jit(accumulate)(1.5)

# case: state updated under vmap with a batched policy

per_row = fx.State[jax.Array]("per_row")


@fx.uses(per_row)
def add_square(v: jax.Array) -> jax.Array:
    return per_row.modify(lambda s: s + v**2)


with per_row.init(jnp.zeros(4)) as prc:
    fx.vmap(add_square, state="batched")(jnp.arange(4.0))

# case: batched state update with nothing installed

fx.vmap(add_square, state="batched")(jnp.arange(4.0))  # E: effax-unhandled

# case: a fori_loop accumulating into state


@fx.uses(total)
def add_many(n: int) -> float:
    return fx.fori_loop(0, n, lambda i, c: accumulate(0.5) + c, 0.0)


with total.init(0.0):
    add_many(3)

# case: fori_loop with a rowed body lambda, nothing installed

fx.fori_loop(0, 2, lambda i, c: c + count(), jnp.int32(0))  # E: effax-unhandled

# case: map over rows accumulating into a state

with seen.init(jnp.int32(0)), running.init(jnp.zeros(2)) as rc:
    fx.map(lambda row: observe(row[None, :]), batch)

# case: map of observe under a function missing running


@fx.uses(seen)
def observe_rows(xb: jax.Array) -> jax.Array:
    return fx.map(lambda row: observe(row[None, :]), xb)  # E: effax-undeclared


with seen.init(jnp.int32(0)), running.init(jnp.zeros(2)):
    observe_rows(batch)

# case: repeated eager calls in a comprehension

with seen.init(jnp.int32(0)), running.init(jnp.zeros(2)):
    eager_ns = [observe(batch) for _ in range(2)]

# case: restore a snapshot of state cells

with fx.handlers(seen.init(jnp.int32(0)), running.init(jnp.zeros(2))) as first_run:
    observe(batch)
saved_state = fx.snapshot(first_run)
fresh_cells = fx.handlers(seen.init(jnp.int32(0)), running.init(jnp.zeros(2)))
fx.restore(saved_state, fresh_cells)
with fresh_cells:
    observe(batch)

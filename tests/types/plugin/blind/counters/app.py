"""Programs using the user-defined effects."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx
from counters.effect import Tally, encoder, events, fast_work, visited, work


# case: custom effect declared in the row
@fx.uses(events)
def work_twice(x: jax.Array) -> jax.Array:
    events.tick(jnp.int32(10))
    return work(work(x))


# case: custom handler from the effect's method
@fx.uses()
def count_calls(x: jax.Array) -> jax.Array:
    with events.tally() as tally:
        work(x)
        fast_work(x)
    return tally.value


# case: custom handler constructed directly
@fx.uses()
def count_direct(x: jax.Array) -> jax.Array:
    with Tally(events) as tally:
        work(x)
    return tally.value


# case: both custom effects handled in fx.handlers
@fx.uses()
def run_encoder(x: jax.Array) -> list[str]:
    with fx.handlers(events.tally(), visited.record()) as hs:
        encoder(x)
    return hs.handler(visited).names


# case: custom effect in a scan body within the row
@fx.uses(events)
def scan_work(xs: jax.Array) -> jax.Array:
    _, ys = fx.scan(lambda c, x: (c, work(x)), jnp.float32(0), xs)
    return jnp.asarray(ys)


# case: custom handler held in a variable
@fx.uses(visited)
def encode_counted(x: jax.Array) -> jax.Array:
    tally = events.tally()
    with tally:
        return encoder(x)


# case: custom operation outside the row
@fx.uses(visited)
def tick_missing(x: jax.Array) -> jax.Array:
    events.tick()  # E: effax-undeclared
    return x


# case: rowed function with custom effect outside the row
@fx.uses()
def work_missing(x: jax.Array) -> jax.Array:
    return work(x)  # E: effax-undeclared


# case: visit outside the row
@fx.uses(events)
def visit_missing(x: jax.Array) -> jax.Array:
    visited.visit("decoder")  # E: effax-undeclared
    return work(x)


# case: handler of the other custom effect
@fx.uses()
def wrong_handler(x: jax.Array) -> jax.Array:
    with events.tally():
        return encoder(x)  # E: effax-undeclared


# case: compiled custom-effect function outside the row
@fx.uses(visited)
def fast_missing(x: jax.Array) -> jax.Array:
    return fast_work(x)  # E: effax-undeclared


# case: custom effect in a cond branch outside the row
@fx.uses()
def cond_missing(x: jax.Array) -> jax.Array:
    fx.cond(x > 0, lambda: events.tick(), lambda: None)  # E: effax-undeclared
    return x


# case: custom effect at module level
y_work = work(jnp.float32(1.0))  # E: effax-unhandled

# case: custom effect at module level under its handler
with events.tally() as module_tally:
    y_ok = work(jnp.float32(1.0))

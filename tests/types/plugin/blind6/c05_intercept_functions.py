"""`fx.intercept` with lambdas and named functions, local and from the helper package."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx
from b6lib import interceptors as ic
from b6lib.effects import acts, draws, dropout, init_key, losses, temperature, verbose
from b6lib.layers import Stack, drop, maybe_log, report, softmax_t

X = jnp.linspace(-1.0, 1.0, 4)

# case: a forwarding interceptor from the helper, with the provider outside it
with temperature.provide(jnp.float32(2.0)), ic.warmer:
    probs = softmax_t(X)
    probs_jit = fx.jit(softmax_t)(X)

# case: the forwarding interceptor alone
with ic.warmer:
    probs_bad = softmax_t(X)  # E: effax-unhandled
with ic.warmer:
    probs_bad_jit = fx.jit(softmax_t)(X)  # E: effax-unhandled

# case: an interceptor whose named function answers alone needs no provider
with ic.cold:
    probs_cold = softmax_t(X)
    probs_cold_jit = fx.jit(softmax_t)(X)
frozen_at = fx.intercept(temperature, ask=ic.frozen_temperature)
with frozen_at:
    probs_frozen = softmax_t(X)

# case: an interceptor in a bundle after the collector, and one outside a collector (never reached)
with fx.handlers(losses.collect(), ic.half_losses) as hs:
    report(jnp.float32(4.0))
with ic.half_losses, losses.collect() as inner_collector:
    report(jnp.float32(4.0))

# case: a bundle holding only the forwarding interceptor
with fx.handlers(ic.half_losses):
    report(jnp.float32(4.0))  # E: effax-unhandled

# case: handled functions chaining an interceptor over a cell
halved_report = fx.handle(report, losses.collect(), ic.half_losses)
halved_value = halved_report(jnp.float32(2.0))
halved_jit = fx.handle(report, losses.collect(), ic.half_losses, transform=jax.jit)(jnp.float32(2.0))

# case: a handled function given only the interceptor
only_interceptor = fx.handle(report, ic.half_losses)
lost = only_interceptor(jnp.float32(2.0))  # E: effax-unhandled
lost_jit = fx.handle(report, ic.half_losses, transform=jax.jit)(jnp.float32(2.0))  # E: effax-unhandled

# case: a counting interceptor whose function updates a State installed outside it
with fx.handlers(draws.init(jnp.int32(0)), dropout.seed(0)) as counted, ic.counting:
    dropped = drop(jnp.ones(8))
    dropped_jit = fx.jit(drop)(jnp.ones(8))

# case: the counter installed inside the interceptor, where its function cannot see it
with dropout.seed(0), ic.counting:
    with draws.init(jnp.int32(0)):
        dropped_bad = drop(jnp.ones(8))  # E: effax-unhandled
with dropout.seed(0), ic.counting, draws.init(jnp.int32(0)):
    dropped_bad_jit = fx.jit(lambda v: drop(v, rate=0.2))(jnp.ones(8))  # E: effax-unhandled


# case: a local named function that emits while it answers the temperature
def logged_temperature(outer: fx.Provider[jax.Array]) -> jax.Array:
    t = outer.ask()
    losses.emit(t)
    return t


logging_t = fx.intercept(temperature, ask=logged_temperature)
with losses.collect() as seen_t, temperature.provide(jnp.float32(1.0)), logging_t:
    probs_logged = softmax_t(X)

# case: the local function's collector installed under the interceptor
with temperature.provide(jnp.float32(1.0)), logging_t, losses.collect():
    probs_logged_bad = softmax_t(X)  # E: effax-unhandled


# case: an interceptor installed inside a function whose row holds what it forwards to
@fx.uses(temperature)
def sharpened(x: jax.Array) -> jax.Array:
    with fx.intercept(temperature, ask=lambda outer: 0.5 * outer.ask()):
        return softmax_t(x)


with temperature.provide(jnp.float32(1.0)):
    sharp = sharpened(X)
    sharp_jit = fx.jit(sharpened)(X)


# case: the same interceptor inside a function whose row lacks the temperature
@fx.uses(dropout)
def sharpened_drop(x: jax.Array) -> jax.Array:
    with fx.intercept(temperature, ask=lambda outer: 0.5 * outer.ask()):
        y = softmax_t(x)  # E: effax-undeclared
    return drop(y)


with temperature.provide(jnp.float32(1.0)), dropout.seed(1):
    sharp_drop = sharpened_drop(X)


# case: a counting interceptor installed by a function whose row holds the counter
@fx.uses(dropout, draws)
def counted_drop(x: jax.Array) -> jax.Array:
    with ic.counting:
        return drop(x)


with draws.init(jnp.int32(0)), dropout.seed(2):
    counted_once = counted_drop(jnp.ones(4))


# case: the counting interceptor installed by a function whose row lacks the counter
@fx.uses(dropout)
def counted_drop_narrow(x: jax.Array) -> jax.Array:
    with ic.counting:
        return drop(x)  # E: effax-undeclared


with draws.init(jnp.int32(0)), dropout.seed(2):
    counted_narrow = counted_drop_narrow(jnp.ones(4))


# case: an interceptor over a scan body that calls a helper-package layer stack
with init_key.seed(0):
    STACK = Stack([4, 4, 4])


@fx.uses(dropout, acts)
def stack_layer(x: jax.Array) -> jax.Array:
    return STACK(x)


@fx.uses(dropout, acts, draws)
def scanned_stack(xs: jax.Array) -> jax.Array:
    with ic.counting:
        _, ys = fx.scan(lambda c, x: (c, stack_layer(x)), 0, xs)
    return ys


with fx.handlers(dropout.seed(0), draws.init(jnp.int32(0)), acts.ignore()) as scan_hs:
    scanned = scanned_stack(jnp.ones((3, 4)))


# case: the scan under the counting interceptor in a function whose row lacks the counter
@fx.uses(dropout, acts)
def scanned_stack_narrow(xs: jax.Array) -> jax.Array:
    with ic.counting:
        _, ys = fx.scan(lambda c, x: (c, stack_layer(x)), 0, xs)  # E: effax-undeclared
    return ys


with fx.handlers(dropout.seed(0), draws.init(jnp.int32(0)), acts.ignore()):
    scanned_narrow = scanned_stack_narrow(jnp.ones((3, 4)))

# case: tap interceptors: one that answers every tap alone, one that renames and forwards
with dropout.seed(3), acts.record() as rec, ic.prefixed:
    renamed = stack_layer(jnp.ones(4))
with dropout.seed(3), ic.muted:
    unrecorded = stack_layer(jnp.ones(4))

# case: the renaming interceptor with no tap handler outside it
with dropout.seed(3), ic.prefixed:
    renamed_bad = stack_layer(jnp.ones(4))  # E: effax-unhandled

# case: a fresh interceptor per iteration, a lambda closing over the loop variable
with losses.collect() as scaled_losses:
    for k in range(3):
        with fx.intercept(losses, emit=lambda outer, v, k=k: outer.emit(k * v)):
            report(jnp.float32(1.0))

# case: a static defaulted Ask negated by a forwarding interceptor, no provider
with fx.intercept(verbose, ask=lambda outer: not outer.ask()):
    flipped = maybe_log(jnp.ones(2))  # E: effax-unhandled
with verbose.provide(True), fx.intercept(verbose, ask=lambda outer: not outer.ask()):
    flipped_ok = maybe_log(jnp.ones(2))

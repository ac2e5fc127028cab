"""Library functions that perform effects, with declared rows."""

import functools

import jax
import jax.numpy as jnp

import effax as fx
from fxlib.decls import (
    ROW,
    Config,
    acts,
    bn,
    config,
    dropout,
    losses,
    lr,
    mode,
    scale,
    steps,
    temperature,
    verbose,
)

# case: a scaled layer asking its temperature
@fx.uses(temperature)
def scaled(x: jax.Array) -> jax.Array:
    return x * temperature.ask()

# case: counted calls scaled, both effects in the row
@fx.uses(temperature, steps)
def counted(x: jax.Array) -> jax.Array:
    steps.modify(lambda n: n + 1)
    return scaled(x)

# case: row from a module-level tuple
@fx.uses(*ROW)
def counted_twice(x: jax.Array) -> jax.Array:
    return counted(counted(x))

# case: dropout with its key stream in the row
@fx.uses(dropout)
def drop(x: jax.Array, rate: float = 0.5) -> jax.Array:
    keep = jax.random.bernoulli(dropout.next_key(), 1 - rate, x.shape)
    return jnp.where(keep, x / (1 - rate), 0.0)

# case: noisy layer forgets that drop draws keys
@fx.uses(temperature)
def noisy_layer(x: jax.Array) -> jax.Array:
    return drop(scaled(x))  # E: effax-undeclared

# case: emits a loss but the row only lists steps
@fx.uses(steps)
def tracked_loss(x: jax.Array) -> jax.Array:
    steps.modify(lambda n: n + 1)
    value = jnp.mean(x**2)
    losses.emit(value)  # E: effax-undeclared
    return value

# case: handles steps locally, so steps is not in the row
@fx.uses(temperature)
def locally_counted(x: jax.Array) -> jax.Array:
    with steps.init(jnp.int32(0)):
        y = counted(x)
    return y

# case: the local handler ends before the second call
@fx.uses(temperature)
def counted_after_block(x: jax.Array) -> jax.Array:
    with steps.init(jnp.int32(0)):
        y = counted(x)
    return counted(y)  # E: effax-undeclared

# case: a default Ask still belongs in the row
@fx.uses(verbose)
def report(x: jax.Array) -> jax.Array:
    if verbose.ask():
        print("report", x)
    return x

# case: calling report from a row without verbose
@fx.uses(temperature)
def scaled_and_reported(x: jax.Array) -> jax.Array:
    return report(scaled(x))  # E: effax-undeclared

# case: the learning rate has a default, declared in the row
@fx.uses(lr)
def sgd_update(w: jax.Array, g: jax.Array) -> jax.Array:
    return w - lr.ask() * g

# case: a static mode switch picks the activation
@fx.uses(mode)
def activate(x: jax.Array) -> jax.Array:
    return jnp.tanh(x) if mode.ask() == "tanh" else jax.nn.relu(x)

# case: static config shapes the stack, mode forgotten
@fx.uses(config)
def stack(x: jax.Array) -> jax.Array:
    for _ in range(config.ask().layers):
        x = activate(x)  # E: effax-undeclared
    return x

# case: pure entry point installs everything it needs
@fx.uses()
def entry(x: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array]:
    with fx.handlers(temperature.provide(t), steps.init(jnp.int32(0))) as hs:
        y = counted(x)
    return y, hs[steps]

# case: pure entry point that forgets the steps handler
@fx.uses()
def leaky_entry(x: jax.Array, t: jax.Array) -> jax.Array:
    with temperature.provide(t):
        return counted(x)  # E: effax-undeclared

# case: fx.handle covers steps, only temperature remains
@fx.uses(temperature)
def handled_counter(x: jax.Array) -> jax.Array:
    fresh = fx.handle(counted, steps.init(jnp.int32(0)))
    return fresh(x)

# case: fx.jit of counted called where steps is not declared
@fx.uses(temperature)
def compiled_counter(x: jax.Array) -> jax.Array:
    fast = fx.jit(counted)
    return fast(x)  # E: effax-undeclared

# case: a partial keeps the row of scaled
@fx.uses(temperature)
def partial_scaled(x: jax.Array) -> jax.Array:
    f = functools.partial(scaled)
    return f(x)

# case: partial of counted under a row lacking steps
@fx.uses(temperature)
def partial_counted(x: jax.Array) -> jax.Array:
    f = functools.partial(counted)
    return f(x)  # E: effax-undeclared

# case: taps inside a layer with the tap in the row
@fx.uses(acts, temperature)
def tapped_layer(x: jax.Array) -> jax.Array:
    h = acts.tap("hidden", jnp.tanh(x))
    return acts.tap("out", scaled(h))

# case: named running mean with the StateDict in the row
@fx.uses(bn)
def running_mean(name: str, x: jax.Array) -> jax.Array:
    mean = bn.get(f"{name}/mean", init=lambda: jnp.zeros(x.shape[-1]))
    bn.set(f"{name}/mean", 0.9 * mean + 0.1 * jnp.mean(x, axis=0))
    return x - mean

# case: normalising with a StateDict that the row omits
@fx.uses(scale)
def normalised(x: jax.Array) -> jax.Array:
    centred = running_mean("norm", x)  # E: effax-undeclared
    return centred * scale.ask()

# case: resets the counter but calls scaled without temperature in the row
@fx.uses(steps)
def reset_and_scale(x: jax.Array) -> jax.Array:
    steps.set(jnp.int32(0))
    return scaled(x)  # E: effax-undeclared

# case: a scale read under a row without it
@fx.uses(temperature)
def double_scaled(x: jax.Array) -> jax.Array:
    return scaled(x) * scale.ask()  # E: effax-undeclared

if __name__ == "__main__":
    # case: main block drives the correct library functions
    x0 = jnp.ones((4, 2))
    with fx.handlers(temperature.provide(jnp.float32(2.0)), steps.init(jnp.int32(0))) as hs0:
        counted_twice(x0)
        locally_counted(x0)
        handled_counter(x0)
        partial_scaled(x0)
    print(hs0[steps], entry(x0, jnp.float32(0.5))[1])
    # case: defaults need no handler at module level
    print(sgd_update(jnp.ones(2), jnp.ones(2)), report(x0).shape, verbose.ask())
    # case: main block drives noisy_layer with every handler
    with fx.handlers(temperature.provide(jnp.float32(2.0)), dropout.seed(0)): noisy_layer(x0)
    # case: main block drives tracked_loss
    with fx.handlers(steps.init(jnp.int32(0)), losses.collect()): tracked_loss(x0)
    # case: main block drives counted_after_block
    with fx.handlers(temperature.provide(jnp.float32(2.0)), steps.init(jnp.int32(0))): counted_after_block(x0)
    # case: main block drives scaled_and_reported
    with fx.handlers(temperature.provide(jnp.float32(2.0)), verbose.provide(False)): scaled_and_reported(x0)
    # case: main block drives stack under config and mode
    with fx.handlers(config.provide(Config(layers=2)), mode.provide("tanh")): stack(x0)
    # case: main block drives leaky_entry
    with fx.handlers(temperature.provide(jnp.float32(2.0)), steps.init(jnp.int32(0))): leaky_entry(x0, jnp.float32(1.0))
    # case: main block drives compiled_counter
    with fx.handlers(temperature.provide(jnp.float32(2.0)), steps.init(jnp.int32(0))): compiled_counter(x0)
    # case: main block drives partial_counted
    with fx.handlers(temperature.provide(jnp.float32(2.0)), steps.init(jnp.int32(0))): partial_counted(x0)
    # case: main block records the taps of tapped_layer
    with fx.handlers(temperature.provide(jnp.float32(2.0)), acts.record()) as taps0: tapped_layer(x0)
    print(sorted(taps0[acts]))
    # case: main block drives normalised
    with fx.handlers(bn.init(), scale.provide(2.0)): normalised(x0)
    # case: main block drives double_scaled
    with fx.handlers(temperature.provide(jnp.float32(2.0)), scale.provide(3.0)): double_scaled(x0)
    # case: scaled called after its handler's block ended
    with temperature.provide(jnp.float32(2.0)): y0 = scaled(x0)
    y1 = scaled(y0)  # E: effax-unhandled
    # case: main block drives reset_and_scale
    with fx.handlers(temperature.provide(jnp.float32(2.0)), steps.init(jnp.int32(0))): reset_and_scale(x0)

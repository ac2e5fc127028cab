"""Scripts: code at module level, in class bodies and under __main__."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx

temperature = fx.Ask[jax.Array]("temperature")
steps = fx.State[jax.Array]("steps")
metrics = fx.Emit[jax.Array]("metrics")


@fx.uses(temperature)
def scaled(x: jax.Array) -> jax.Array:
    return x * temperature.ask()


@fx.uses(temperature, steps)
def counted(x: jax.Array) -> jax.Array:
    steps.modify(lambda n: n + 1)
    return scaled(x)


@fx.uses(fx.rng, metrics)
def main() -> None:
    metrics.emit(fx.random.normal((3,)))


@fx.uses(temperature)
def total(w: jax.Array) -> jax.Array:
    return jnp.sum(scaled(w))


@fx.uses()
def evaluate(x: jax.Array) -> jax.Array:
    with temperature.provide(jnp.float32(1.0)):
        return scaled(x)


xs = [jnp.ones(3), jnp.zeros(3)]

# case: handlers installed by a module-level with
with fx.handlers(temperature.provide(jnp.float32(2.0)), steps.init(jnp.int32(0))) as hs:
    y_ok = counted(jnp.ones(3))
print(y_ok, hs[steps])

# case: making a compiled function does not perform
fast_counted = fx.jit(counted)
grad_scaled = fx.grad(total)

# case: handled function called under the remaining handler
handled_counted = fx.handle(counted, steps.init(jnp.int32(0)))
with temperature.provide(jnp.float32(0.5)):
    y_handled = handled_counted(jnp.ones(2))

# case: class body creates handlers and wrappers only
class Defaults:
    provider = temperature.provide(jnp.float32(1.0))
    fast = fx.jit(scaled)
    cell = steps.init(jnp.int32(0))


# case: pure entry point called at module level
y_eval = evaluate(jnp.ones(3))

# case: loop inside a handling with
with steps.init(jnp.int32(0)) as cell_loop, temperature.provide(jnp.float32(3.0)):
    for v in xs:
        counted(v)

# case: compiled call inside with
with temperature.provide(jnp.float32(1.5)), steps.init(jnp.int32(0)):
    y_fast = fast_counted(jnp.ones(3))

# case: bare call of a rowed function
y_bare = scaled(jnp.ones(3))  # E: effax-unhandled

# case: bare effect operation
t_bare = temperature.ask()  # E: effax-unhandled

# case: only part of the row handled
with steps.init(jnp.int32(0)):
    y_part = counted(jnp.ones(3))  # E: effax-unhandled

# case: compiled call at module level
y_jit = fx.jit(scaled)(jnp.ones(2))  # E: effax-unhandled

# case: handle leaves an effect unhandled
y_left = fx.handle(counted, steps.init(jnp.int32(0)))(jnp.ones(3))  # E: effax-unhandled

# case: class body performs an effect
class Config:
    default_temperature = temperature.ask()  # E: effax-unhandled


# case: call after the with block
with temperature.provide(jnp.float32(2.0)):
    y_in = scaled(jnp.ones(3))
y_after = scaled(jnp.ones(3))  # E: effax-unhandled

# case: module-level loop
for _ in range(3):
    steps.modify(lambda n: n + 1)  # E: effax-unhandled

# case: comprehension at module level
ys_comp = [scaled(v) for v in xs]  # E: effax-unhandled

# case: stored grad called at module level
g_bare = grad_scaled(jnp.ones(3))  # E: effax-unhandled

# case: main guard with handlers
if __name__ == "__main__":
    with fx.rng.seed(0), metrics.collect() as collected:
        main()
    print(collected.value)

# case: main guard without handlers
if __name__ == "__main__":
    main()  # E: effax-unhandled

# case: main guard handles only one effect
if __name__ == "__main__":
    with metrics.discard():
        main()  # E: effax-unhandled

"""A command-line evaluation script: module-level code with handlers."""

import argparse

import jax
import jax.numpy as jnp

import effax as fx
from fxlib import acts, bn, dropout, losses, mode, params, scale, steps, temperature
from fxlib.custom import energy, events
from fxlib.ops import counted, drop, entry, running_mean, scaled, stack, tapped_layer
from oop_shapes import Buffer, Scaler, Schedule
from samplers.kernels import chain, proposal_scale

parser = argparse.ArgumentParser(description="evaluate a tiny model")
parser.add_argument("--temperature", type=float, default=1.0)
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args([])
X = jnp.ones(3)
T = jnp.float32(args.temperature)
fast_counted = fx.jit(counted)

# case: the script calls its layers before installing any handler
y_scaled = scaled(X)  # E: effax-unhandled
y_counted = counted(X)  # E: effax-unhandled
y_drop = drop(X)  # E: effax-unhandled
y_fast = fast_counted(X)  # E: effax-unhandled

# case: raw operations at module level with nothing installed
t_now = temperature.ask()  # E: effax-unhandled
steps.set(jnp.int32(1))  # E: effax-unhandled
steps.modify(lambda n: n + 1)  # E: effax-unhandled
key0 = dropout.next_key()  # E: effax-unhandled
z0 = fx.random.normal((2,))  # E: effax-unhandled
losses.emit(jnp.float32(0.0))  # E: effax-unhandled
tapped0 = acts.tap("input", X)  # E: effax-unhandled
mean0 = bn.get("mean", init=jnp.zeros(3))  # E: effax-unhandled
energy.add(1.0)  # E: effax-unhandled

# case: effax wrappers called at module level with nothing installed
fx.grad(lambda w: jnp.sum(scaled(w)))(X)  # E: effax-unhandled
fx.vmap(scaled)(jnp.ones((2, 3)))  # E: effax-unhandled
fx.checkpoint(scaled)(X)  # E: effax-unhandled
fx.value_and_grad(lambda w: scale.ask() * jnp.sum(w))(X)  # E: effax-unhandled
fx.handle(counted, steps.init(jnp.int32(0)))(X)  # E: effax-unhandled
fast_counted.lower(X)  # E: effax-unhandled

# case: control flow at module level with nothing installed
fx.cond(True, lambda: steps.get(), lambda: steps.get())  # E: effax-unhandled
fx.switch(1, [lambda: X, lambda: scaled(X)])  # E: effax-unhandled
fx.fori_loop(0, 3, lambda i, c: c + scale.ask(), jnp.asarray(0.0))  # E: effax-unhandled
fx.scan(lambda c, x: (c + fx.random.uniform(), None), jnp.asarray(0.0), None, length=2)  # E: effax-unhandled

# case: classes and library entry points at module level with nothing installed
Scaler(1.0)(X)  # E: effax-unhandled
print(Schedule(0.5).rate)  # E: effax-unhandled
Buffer[int](1)  # E: effax-unhandled
stack(X)  # E: effax-unhandled
running_mean("input", jnp.ones((2, 3)))  # E: effax-unhandled
tapped_layer(X)  # E: effax-unhandled
chain(jnp.zeros(2), 3)  # E: effax-unhandled

# case: a pure entry point needs no handler
print(entry(X, T))

# case: the handler for the wrong effect
with steps.init(jnp.int32(0)):
    scaled(X)  # E: effax-unhandled
with temperature.provide(T):
    fast_counted(X)  # E: effax-unhandled
with dropout.seed(0):
    fx.random.normal()  # E: effax-unhandled
with losses.discard():
    events.tick()  # E: effax-unhandled

# case: the with block ends before the last call
with fx.handlers(temperature.provide(T), steps.init(jnp.int32(0))) as hs:
    for _ in range(args.steps):
        fast_counted(X)
print("after", hs[steps], counted(X))  # E: effax-unhandled

# case: evaluation under every handler the script needs
with fx.handlers(temperature.provide(T), steps.init(jnp.int32(0)), dropout.seed(0), losses.collect(), acts.ignore()):
    for _ in range(args.steps):
        fast_counted(drop(X))
        tapped_layer(X)
    print(fx.grad(lambda w: jnp.sum(scaled(w)))(X), fast_counted.lower(X) is not None)

# case: a sampler run under its handlers, including the default stream
with fx.handlers(proposal_scale.provide(jnp.float32(0.5)), fx.rng.seed(0)):
    print(chain(jnp.zeros(2), 4).shape, fx.random.normal(), fx.switch(1, [lambda: X, lambda: X * proposal_scale.ask()]))

# case: state ops and custom effects under their handlers
with fx.handlers(params.init({"w": X}), events.tally(), energy.gauge(), bn.init()) as hs2:
    params.modify(lambda p: {"w": p["w"] * 2})
    events.tick()
    energy.add(2.0)
    running_mean("input", jnp.ones((2, 3)))
print(hs2[params]["w"], hs2[events], hs2[energy])

if __name__ == "__main__":
    # case: the main block asks for the static mode that nobody provided
    print("mode", mode.ask())  # E: effax-unhandled
    # case: the main block evaluates with the mode provided
    with fx.handlers(mode.provide("eval"), temperature.provide(T)): print(mode.ask(), scaled(X))
    # case: jax.jit over a lambda that calls the sampler, nothing installed
    jax.jit(lambda x: chain(x, 2))(jnp.zeros(2))  # E: effax-unhandled

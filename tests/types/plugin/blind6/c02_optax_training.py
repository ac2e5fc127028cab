"""Training loops over `State` cells with optax: compiled steps, cells, snapshots."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax  # E: import-untyped

import effax as fx
from b6lib import training as T
from b6lib.effects import TRAIN_ROW, learning_rate, losses, opt_state, params, running_loss, steps
from b6lib.training import OPTIMIZER, counted_step, sgd_step, track

X, Y = T.data(16)
P0 = T.init_params(jax.random.key(0))

# case: a helper building every handler the step needs, around a compiled loop
with T.handlers_for(P0) as hs:
    history = T.run_steps(fx.jit(sgd_step), X, Y, 3)
final_params = hs[params]

# case: the cells passed to fx.handle, spread from a tuple
cells = (
    params.init(P0),
    opt_state.init(OPTIMIZER.init(P0)),
    learning_rate.provide(jnp.float32(0.05)),
    losses.collect(),
)
owned_step = fx.handle(sgd_step, *cells, transform=jax.jit)
for _ in range(3):
    owned_step(X, Y)

# case: fx.handle given only the states: the learning rate and the losses are left to the caller
partial_cells = (params.init(P0), opt_state.init(OPTIMIZER.init(P0)))
half_owned = fx.handle(sgd_step, *partial_cells, transform=jax.jit)
first_loss = half_owned(X, Y)  # E: effax-unhandled
with learning_rate.provide(jnp.float32(0.1)):
    second_loss = half_owned(X, Y)  # E: effax-unhandled
with losses.collect(), learning_rate.provide(jnp.float32(0.1)):
    third_loss = half_owned(X, Y)

# case: an epoch loop with one `with` holding several handlers
with (
    params.init(jax.tree.map(jnp.copy, P0)) as p_cell,
    opt_state.init(OPTIMIZER.init(P0)),
    learning_rate.provide(jnp.float32(0.01)),
    losses.collect() as collected,
    steps.init(jnp.int32(0)) as counter,
):
    step = fx.jit(counted_step, donate_state=True)
    for epoch in range(2):
        for i in range(0, 16, 8):
            step(X[i : i + 8], Y[i : i + 8])
epoch_losses = [float(v) for v in collected.values]

# case: the same loop without the step counter
with (
    params.init(P0),
    opt_state.init(OPTIMIZER.init(P0)),
    learning_rate.provide(jnp.float32(0.01)),
    losses.collect(),
):
    step = fx.jit(counted_step)
    for epoch in range(2):
        step(X, Y)  # E: effax-unhandled


# case: a trainer whose row holds the whole training row
@fx.uses(*TRAIN_ROW)
def train(n: int) -> list[float]:
    out = []
    compiled = fx.jit(sgd_step)
    for _ in range(n):
        out.append(float(compiled(X, Y)))
    return out


with T.handlers_for(P0):
    trained = train(2)


# case: a trainer whose row leaves out the emitted losses
@fx.uses(params, opt_state, learning_rate)
def train_quietly(n: int) -> float:
    loss = jnp.float32(0)
    for _ in range(n):
        loss = sgd_step(X, Y)  # E: effax-undeclared
    return float(loss)


with T.handlers_for(P0):
    quiet = train_quietly(2)


# case: the trainer handles the losses itself: its row need not hold them
@fx.uses(params, opt_state, learning_rate)
def train_collecting(n: int) -> list[jax.Array]:
    with losses.collect() as got:
        for _ in range(n):
            sgd_step(X, Y)
    return got.values


with T.handlers_for(P0):
    collected_inside = train_collecting(2)


# case: an early return before the effect in a function with a row, then a late one after it
@fx.uses(params)
def maybe_update(x: jax.Array, skip: bool) -> jax.Array:
    if skip:
        return params.get()["w"]
    scale = learning_rate.ask()  # E: effax-undeclared
    params.modify(lambda p: {**p, "w": p["w"] * scale})
    return params.get()["w"]


with params.init(P0), learning_rate.provide(jnp.float32(0.5)):
    kept = maybe_update(X, True)
with params.init(P0), learning_rate.provide(jnp.float32(0.5)):
    scaled = maybe_update(X, False)

# case: a State[float] started from a float, updated in compiled code
with running_loss.init(0.0) as ema_cell:
    for value in (0.5, 0.25, 0.125):
        fx.jit(track)(jnp.float32(value))
smoothed = ema_cell.value
tracked = fx.handle(track, running_loss.init(1.0), transform=jax.jit)(jnp.float32(0.3))

# case: a State[float] started from an int, updated in compiled code
with running_loss.init(0):  # E: effax-handler-type
    for value in (0.5, 0.25):
        fx.jit(track)(jnp.float32(value))
tracked_int = fx.handle(track, running_loss.init(1), transform=jax.jit)(jnp.float32(0.3))  # E: effax-handler-type
if __name__ == "__main__":
    ema = running_loss.init(0)  # E: effax-handler-type
    smooth = fx.handle(track, ema, transform=jax.jit)
    for value in (1.0, 0.5):
        smooth(jnp.float32(value))
with running_loss.init(2):  # E: effax-handler-type
    fx.fori_loop(0, 3, lambda i, c: (track(jnp.float32(i)), c)[1], 0)

# case: functools.partial of a step, called with the handlers around it
step_on_x = functools.partial(sgd_step, X)
with T.handlers_for(P0):
    partial_loss = step_on_x(Y)

# case: the partial called at module level with nothing installed
partial_unhandled = step_on_x(Y)  # E: effax-unhandled

# case: ahead-of-time stages stage the handlers installed at that moment
with T.handlers_for(P0):
    lowered = fx.jit(sgd_step).lower(X, Y)
cost: Any = lowered.compile().cost_analysis()

# case: staging with nothing installed
traced = fx.jit(sgd_step).trace(X, Y)  # E: effax-unhandled


# case: snapshot a run, restore it into fresh cells, and resume
def fresh() -> fx.Handlers:
    return fx.handlers(
        params.init(P0),
        opt_state.init(OPTIMIZER.init(P0)),
        learning_rate.provide(jnp.float32(0.02)),
        losses.collect(),
    )


run = fresh()
with run:
    for _ in range(2):
        fx.jit(sgd_step)(X, Y)
saved = fx.snapshot(run)
resumed = fresh()
fx.restore(saved, resumed)
with resumed:
    fx.jit(sgd_step)(X, Y)

# case: an optax schedule read through a traced Ask, inside a jitted update
schedule = optax.exponential_decay(0.1, transition_steps=10, decay_rate=0.5)


@fx.uses(learning_rate, steps)
def current_lr() -> jax.Array:
    n = steps.modify(lambda k: k + 1)
    return learning_rate.ask() * schedule(n)  # E: no-any-return


with learning_rate.provide(jnp.float32(1.0)), steps.init(jnp.int32(0)):
    lrs = [float(fx.jit(current_lr)()) for _ in range(3)]

# case: the schedule read in a comprehension without its step counter
with learning_rate.provide(jnp.float32(1.0)):
    lrs_bad = [float(fx.jit(current_lr)()) for _ in range(3)]  # E: effax-unhandled

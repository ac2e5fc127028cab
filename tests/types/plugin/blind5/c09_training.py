"""Training loops: optax with effects, pure entry points, CLI scripts."""

from __future__ import annotations

import argparse
from typing import Any

import jax
import jax.numpy as jnp

import effax as fx
from b5lib import training as tr
from b5lib.effects import dropout as drop_rng
from b5lib.effects import learning_rate as lr
from b5lib.effects import losses as loss_events
from b5lib.effects import steps as step_no

X = jnp.linspace(-1.0, 1.0, 8).reshape(4, 2)
Y = jnp.sum(X, axis=1, keepdims=True)


def fresh_cells() -> tuple[fx.Handler[Any], ...]:
    p = tr.init_params(2)
    return (
        tr.params_state.init(p),
        tr.opt_state_eff.init(tr.OPTIMIZER.init(p)),
        step_no.init(jnp.int32(0)),
        loss_events.collect(),
        drop_rng.seed(0),
    )


# case: a compiled training loop under every handler its row needs
step_fn = fx.jit(tr.train_step)
with fx.handlers(*fresh_cells()) as hs:
    for _ in range(3):
        step_fn(X, Y)
print(hs[step_no], len(hs[loss_events]))

# case: the compiled step with the key stream forgotten
with fx.handlers(*fresh_cells()[:4]):
    step_fn(X, Y)  # limit: a spread of a function's result sliced (`*fresh_cells()[:4]`) cannot be listed (marked effax-unhandled when written; missed in the score)

# case: a pure entry point that installs everything itself
@fx.uses()
def fit(n_steps: int) -> jax.Array:
    p = tr.init_params(2)
    cells = (tr.params_state.init(p), tr.opt_state_eff.init(tr.OPTIMIZER.init(p)), step_no.init(jnp.int32(0)))
    with fx.handlers(*cells, loss_events.collect(), drop_rng.seed(1)) as inner:
        for _ in range(n_steps):
            tr.train_step(X, Y)
    return jnp.stack(inner[loss_events])


print(fit(2))

# case: a pure entry point that forgets the collector, called under one anyway
@fx.uses()
def fit_forgetful(n_steps: int) -> None:
    p = tr.init_params(2)
    with fx.handlers(tr.params_state.init(p), tr.opt_state_eff.init(tr.OPTIMIZER.init(p))):
        with step_no.init(jnp.int32(0)), drop_rng.seed(1):
            for _ in range(n_steps):
                tr.train_step(X, Y)  # E: effax-undeclared


with loss_events.collect():
    fit_forgetful(1)

# case: an effax.scan over steps inside a compiled epoch
@fx.uses(drop_rng, tr.params_state, tr.opt_state_eff, step_no, loss_events)
def epoch(xs: jax.Array, ys: jax.Array) -> jax.Array:
    def body(c: jax.Array, batch: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        return c + 1, tr.train_step(*batch)

    return fx.scan(body, jnp.int32(0), (xs, ys))[1]


with fx.handlers(*fresh_cells()) as ep_hs:
    print(fx.jit(epoch)(jnp.stack([X, X]), jnp.stack([Y, Y])))
print(ep_hs[step_no])

# case: an epoch with a row missing the emitted losses
@fx.uses(drop_rng, tr.params_state, tr.opt_state_eff, step_no)
def epoch_quiet(xs: jax.Array, ys: jax.Array) -> jax.Array:
    return fx.scan(lambda c, b: (c, tr.train_step(*b)), jnp.int32(0), (xs, ys))[1]  # E: effax-undeclared


with fx.handlers(*fresh_cells()):
    epoch_quiet(jnp.stack([X]), jnp.stack([Y]))

# case: weight decay reads the learning rate provided around the call
with fx.handlers(tr.params_state.init(tr.init_params(2)), lr.provide(jnp.float32(0.1))):
    tr.decay(0.5)
    fx.jit(tr.decay, static_argnums=0)(0.5)

# case: weight decay reads the learning rate provided around the call (the failing use)
with tr.params_state.init(tr.init_params(2)):
    tr.decay(0.5)  # E: effax-unhandled

# case: the step handled with its cells, compiled with donation, kept in a variable
cells = fresh_cells()
donating = fx.handle(tr.train_step, *cells, transform=jax.jit, donate_state=True)
for _ in range(2):
    donating(X, Y)
print(cells[2].value)

# case: the handled step missing the optimiser state cell
p0 = tr.init_params(2)
half_handled = fx.handle(tr.train_step, tr.params_state.init(p0), step_no.init(jnp.int32(0)), loss_events.collect(), drop_rng.seed(2))
half_handled(X, Y)  # E: effax-unhandled

# case: a command-line entry point parsing its arguments
def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="train")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


@fx.uses()
def cli(argv: list[str]) -> int:
    args = parse(argv)
    p = tr.init_params(2)
    with fx.handlers(
        tr.params_state.init(p),
        tr.opt_state_eff.init(tr.OPTIMIZER.init(p)),
        step_no.init(jnp.int32(0)),
        loss_events.collect(),
        drop_rng.seed(args.seed),
    ) as run:
        for _ in range(args.steps):
            fx.jit(tr.train_step)(X, Y)
    return int(run[step_no])


@fx.uses()
def cli_unseeded(argv: list[str]) -> int:
    args = parse(argv)
    p = tr.init_params(2)
    with fx.handlers(tr.params_state.init(p), tr.opt_state_eff.init(tr.OPTIMIZER.init(p)), step_no.init(jnp.int32(0)), loss_events.collect()) as run:
        for _ in range(args.steps):
            fx.jit(tr.train_step)(X, Y)  # E: effax-undeclared
    return int(run[step_no])


if __name__ == "__main__":
    print(cli(["--steps", "2"]))
    with drop_rng.seed(0):
        cli_unseeded(["--steps", "1"])

# case: mse evaluated with jax.grad at module level, with and without the stream
with drop_rng.seed(3):
    print(jax.grad(tr.mse)(tr.init_params(2), X, Y)["w"].shape)

# case: mse evaluated with jax.grad at module level, with and without the stream (the failing use)
jax.grad(tr.mse)(tr.init_params(2), X, Y)  # E: effax-unhandled

# case: evaluation under effax.vmap over examples with split keys
with drop_rng.seed(4):
    print(fx.vmap(lambda x: tr.predict(tr.init_params(2), x))(X).shape)

# case: evaluation under effax.vmap over examples with split keys (the failing use)
evaluate = fx.vmap(tr.predict, in_axes=(None, 0))
evaluate(tr.init_params(2), X)  # E: effax-unhandled

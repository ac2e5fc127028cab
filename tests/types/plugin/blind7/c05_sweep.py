"""A hyperparameter sweep script: argparse, dataclass configs, handlers chosen at run time."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools

import jax
import jax.numpy as jnp

import effax as fx
from b7lib.effects import losses, lr, run_name, step_count, weight_decay
from b7lib.training import compiled_step, decayed_step, sgd_step, train_epoch

optimizer_name = fx.Ask[str]("optimizer_name")
momentum = fx.Ask[float]("momentum", static=True)
best_loss = fx.State[float]("best_loss")
trial_losses = fx.Emit[jax.Array]("trial_losses")


@dataclasses.dataclass(frozen=True)
class Trial:
    lr: float
    decay: float
    epochs: int = 2


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="sweep learning rates and weight decay")
    parser.add_argument("--lrs", type=float, nargs="+", default=[0.1, 0.01])
    parser.add_argument("--decays", type=float, nargs="+", default=[0.0, 1e-3])
    parser.add_argument("--compile", action="store_true")
    return parser.parse_args(argv)


args = parse_args([])
trials = [Trial(a, b) for a, b in itertools.product(args.lrs, args.decays)]
xs = jax.random.normal(jax.random.key(0), (4, 8, 3))
ys = xs @ jnp.array([1.0, -2.0, 0.5])
w_init = jnp.zeros(3)


@fx.uses(lr, step_count, losses, weight_decay)
def run_trial(trial: Trial) -> jax.Array:
    w = w_init
    for _ in range(trial.epochs):
        for x, y in zip(xs, ys):
            w = decayed_step(w, x, y)
    return w


@fx.uses(trial_losses)
def sweep(all_trials: list[Trial]) -> list[jax.Array]:
    results = []
    for trial in all_trials:
        h_lr, h_wd = lr.provide(jnp.float32(trial.lr)), weight_decay.provide(jnp.float32(trial.decay))
        with h_lr, h_wd, step_count.init(jnp.int32(0)), losses.collect() as col:
            results.append(run_trial(trial))
        trial_losses.emit(jnp.stack(col.values)[-1])
    return results


@fx.uses(trial_losses)
def sweep_forgetting_decay(all_trials: list[Trial]) -> list[jax.Array]:
    results = []
    for trial in all_trials:
        with lr.provide(jnp.float32(trial.lr)), step_count.init(jnp.int32(0)), losses.discard():
            results.append(run_trial(trial))  # E: effax-undeclared
    return results


# case: the sweep with a collector for the trial losses
with trial_losses.collect() as per_trial:
    weights = sweep(trials)

# case: the sweep with nothing to collect its losses
sweep(trials[:1])  # E: effax-unhandled

# case: a sweep whose trials leave weight decay to the caller (provided outside)
with trial_losses.discard(), weight_decay.provide(jnp.float32(0.0)):
    sweep_forgetting_decay(trials[:1])

# case: one trial with handlers bound before the with, unpacked from a tuple
h_lr, h_steps = lr.provide(jnp.float32(0.1)), step_count.init(jnp.int32(0))
with h_lr, h_steps, losses.discard():
    w_one = run_trial(trials[0])

# case: one trial with the step counter left out (weight decay has a default)
with h_lr, losses.discard():
    run_trial(trials[0])  # E: effax-unhandled

# case: a walrus-bound collector, compiled step
with (col := losses.collect()), lr.provide(jnp.float32(0.1)), step_count.init(jnp.int32(0)):
    w_c = compiled_step(w_init, xs[0], ys[0])

# case: a walrus-bound collector without the learning rate
with (col2 := losses.collect()), step_count.init(jnp.int32(0)):
    compiled_step(w_init, xs[0], ys[0])  # E: effax-unhandled

quiet = args.compile
# case: a conditional handler: either sink handles the losses
with (losses.discard() if quiet else losses.collect()), lr.provide(jnp.float32(0.1)), step_count.init(jnp.int32(0)):
    sgd_step(w_init, xs[0], ys[0])

# case: a conditional handler of the losses, with the step counter missing
with (losses.discard() if quiet else losses.collect()), lr.provide(jnp.float32(0.1)):
    sgd_step(w_init, xs[0], ys[0])  # E: effax-unhandled

# case: an epoch as a compiled handled function, every handler bound
epoch = fx.handle(train_epoch, lr.provide(jnp.float32(0.05)), step_count.init(jnp.int32(0)),
                  losses.discard(), transform=jax.jit)
w_epoch = epoch(w_init, xs, ys)

# case: an epoch handled with its losses only: the rest is left to nothing
loss_only = fx.handle(train_epoch, losses.discard())
loss_only(w_init, xs, ys)  # E: effax-unhandled

# case: an epoch under handlers entered by hand on an ExitStack
with contextlib.ExitStack() as stack:
    stack.enter_context(lr.provide(jnp.float32(0.05)))
    stack.enter_context(losses.discard())
    train_epoch(w_init, xs, ys)  # limit: handlers entered by hand (stack.enter_context): the rest of the block is not reported


@fx.uses(optimizer_name)
def optimizer_tag() -> jax.Array:
    return jnp.float32(len(optimizer_name.ask()))  # E: no-any-return


# case: the optimizer name read eagerly from a traced Ask[str]
with optimizer_name.provide("adam"):
    tag = optimizer_tag()

# case: the optimizer name handled into a jitted function
tagged = fx.handle(optimizer_tag, optimizer_name.provide("sgd"), transform=jax.jit)  # E: effax-handler-type
tagged()  # limit: a handled function given a str to a traced Ask and kept in a variable is reported where effax.handle is given it, the line above (missed in the score)

# case: a momentum given as a hashable float
with momentum.provide(0.9):
    m = momentum.ask()

# case: the best loss kept as a float, updated in a compiled step
with best_loss.init(1e9) as best:
    fx.jit(lambda v: best_loss.modify(lambda b: jnp.minimum(b, v)))(jnp.float32(3.0))  # pyright: ignore[reportArgumentType]  # E: arg-type, return-value

# case: the best loss started from an int, updated in a compiled step
with best_loss.init(1000000000) as best:  # E: effax-handler-type
    fx.jit(lambda v: best_loss.modify(lambda b: jnp.minimum(b, v)))(jnp.float32(3.0))  # pyright: ignore[reportArgumentType]  # E: arg-type, return-value


@fx.uses(run_name)
def describe(trial: Trial) -> str:
    return f"{run_name.ask()}: lr={trial.lr} decay={trial.decay}"


@fx.uses()
def describe_all(all_trials: list[Trial]) -> list[str]:
    return [describe(t) for t in all_trials]  # E: effax-undeclared


@fx.uses()
def describe_optional(trial: Trial) -> str:
    try:
        return describe(trial)
    except fx.UndeclaredEffectError:
        return f"lr={trial.lr}"


# case: a run name from its default, then provided
names = [describe(t) for t in trials]
with run_name.provide("sweep-3"):
    names = [describe(t) for t in trials]
    fallback = describe_optional(trials[0])

# case: a pure entry point describing trials under a provided run name
with run_name.provide("sweep-4"):
    describe_all(trials)

# case: an optional step count read under contextlib.suppress
with contextlib.suppress(fx.UnhandledEffectError):
    steps_so_far = step_count.get()

# case: the step count read without any protection
steps_so_far = step_count.get()  # E: effax-unhandled

if __name__ == "__main__":
    # case: the main block runs the sweep, handled
    with trial_losses.collect() as final_losses:
        sweep(trials[:2])

if __name__ == "__main__":
    # case: the main block runs one trial unhandled
    run_trial(trials[0])  # E: effax-unhandled

# case: a compiled epoch from a variable, handled, then with nothing
fast_epoch = fx.jit(train_epoch)
with lr.provide(jnp.float32(0.05)), step_count.init(jnp.int32(0)), losses.discard():
    fast_epoch(w_init, xs, ys)
fast_epoch(w_init, xs, ys)  # E: effax-unhandled

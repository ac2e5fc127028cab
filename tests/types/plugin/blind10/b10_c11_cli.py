"""A command-line training script: flags, a resumable run (snapshot/restore), staged compilation."""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp

import effax as fx
from b10lib.effects import dropout, losses, lr

weights = fx.State[jax.Array]("weights")
weight_decay = fx.Ask[float]("weight_decay", default=0.0)
log_every = fx.Ask[int]("log_every", static=True, default=1)
progress = fx.Emit[jax.Array]("progress")
X = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)


@fx.uses(dropout, weights)
def loss_now(w: jax.Array) -> jax.Array:
    keep = jax.random.bernoulli(dropout.next_key(), 0.8, X.shape)
    return jnp.mean((jnp.where(keep, X, 0.0) @ w - 1.0) ** 2)


@fx.uses(weights, dropout, losses, lr, weight_decay)
def step() -> jax.Array:
    w = weights.get()
    value, g = jax.value_and_grad(loss_now)(w)
    weights.set(w - lr.ask() * (g + weight_decay.ask() * w))
    losses.emit(value)
    return value  # E: no-any-return


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="train a tiny regressor")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval", action="store_true")
    p.add_argument("--decay", type=float, default=0.0)
    return p.parse_args(argv)


def fresh_run(seed: int) -> fx.Handlers:
    return fx.handlers(
        weights.init(jnp.ones(3)), dropout.seed(seed), losses.collect(), lr.provide(jnp.float32(0.1))
    )


# case: snapshot after three steps, restore into a fresh run, continue bit for bit
run = fresh_run(0)
fast_step = fx.jit(step)
with run:
    for _ in range(3):
        fast_step()
saved = fx.snapshot(run)
resumed = fresh_run(0)
fx.restore(saved, resumed)
with resumed:
    fast_step()
print(saved["dropout"]["counter"] if isinstance(saved.get("dropout"), dict) else sorted(saved))

# case: the compiled step called with nothing installed
fx.jit(step)()  # E: effax-unhandled

# case: a donated-state step under explicit handlers
donated = fx.jit(step, donate_state=True)
with fx.handlers(weights.init(jnp.ones(3)), dropout.seed(1), losses.discard(), lr.provide(jnp.float32(0.1))) as hs:
    donated()
    donated()
print(hs[weights])

# case: the staged compilation, traced and lowered under handlers
with fx.handlers(weights.init(jnp.ones(3)), dropout.seed(1), losses.discard(), lr.provide(jnp.float32(0.1))):
    traced = fx.jit(step).trace()
    lowered = fx.jit(step).lower()
print(type(traced).__name__, type(lowered).__name__)


# case: a decay helper that asks the weight decay outside its row, under a caller's provider
@fx.uses(weights)
def apply_decay() -> None:
    weights.modify(lambda w: w * (1 - weight_decay.ask()))  # E: effax-undeclared


with weights.init(jnp.ones(3)), weight_decay.provide(0.1):
    apply_decay()


# case: the decay helper with the decay in its row: its default answers
@fx.uses(weights, weight_decay)
def apply_decay_ok() -> None:
    weights.modify(lambda w: w * (1 - weight_decay.ask()))


with weights.init(jnp.ones(3)) as wc:
    apply_decay_ok()
print(wc.value)


# case: progress logged every few steps by a static flag with a default
@fx.uses(weights, dropout, losses, lr, weight_decay, log_every, progress)
def logged_steps(n: int) -> jax.Array:
    def body(i: int, c: jax.Array) -> jax.Array:
        v = step()
        progress.emit(v)
        return c + v

    return fx.fori_loop(0, n * log_every.ask(), body, jnp.float32(0))  # E: no-any-return


with fx.handlers(weights.init(jnp.ones(3)), dropout.seed(2), losses.discard(), lr.provide(jnp.float32(0.1)), progress.collect()) as hs:
    logged_steps(2)
print(hs[progress][0].shape)

# case: the logged steps with the progress collector missing
with fx.handlers(weights.init(jnp.ones(3)), dropout.seed(2), losses.discard(), lr.provide(jnp.float32(0.1))):
    logged_steps(2)  # E: effax-unhandled


# case: an evaluation loss that draws dropout keys from an empty row
@fx.uses()
def eval_loss() -> jax.Array:
    with weights.init(jnp.ones(3)):
        return loss_now(weights.get())  # E: effax-undeclared


with dropout.seed(0):
    eval_loss()

# case: the entry point, with the flags' defaults
if __name__ == "__main__":
    args = parse([])
    with fresh_run(args.seed) as hs, weight_decay.provide(args.decay):
        for _ in range(args.steps):
            fast_step()
    print("final loss", hs[losses][-1], file=sys.stderr)

# case: the entry point picks the loss handler in a branch, then forgets the learning rate
if __name__ == "__main__":
    args = parse(["--eval"])
    if args.eval:
        sink = losses.discard()
    else:
        sink = losses.collect()  # E: assignment
    with sink, weights.init(jnp.ones(3)), dropout.seed(args.seed):
        fast_step()  # limit: a handler variable bound in a branch hides what is under it

# case: the entry point runs one step at module level without a key stream
if __name__ == "__main__":
    args = parse([])
    with weights.init(jnp.ones(3)), losses.collect(), lr.provide(jnp.float32(0.1)):
        step()  # E: effax-unhandled

# case: the entry point evaluates at module level without parameters
if __name__ == "__main__":
    with dropout.seed(0):
        print(loss_now(jnp.ones(3)))  # E: effax-unhandled


# case: a report subcommand that checks the compiled step on a fresh run and prints its losses
def report(seed: int) -> list[float]:
    with fresh_run(seed) as hs:
        fast_step()
        fast_step()
    return [float(v) for v in hs[losses]]


if __name__ == "__main__":
    print(report(int(parse(["--seed", "2"]).seed)))

# case: a learning-rate finder: three rates in a Python loop, each under its own provider
with weights.init(jnp.ones(3)), dropout.seed(0), losses.collect() as lc:
    for rate in (0.01, 0.1, 1.0):
        with lr.provide(jnp.float32(rate)):
            fast_step()
print(len(lc.values))

# case: the finder's loop with the provider entered for the first rate only
with weights.init(jnp.ones(3)), dropout.seed(0), losses.collect():
    with lr.provide(jnp.float32(0.01)):
        fast_step()
    fast_step()  # E: effax-unhandled


# case: a sweep over weight decays, each run owning its handlers through fx.handle
def sweep(decays: tuple[float, ...]) -> list[jax.Array]:
    out = []
    for d in decays:
        run_d = fx.handle(
            step, weights.init(jnp.ones(3)), dropout.seed(0), losses.discard(),
            lr.provide(jnp.float32(0.1)), weight_decay.provide(d),
        )
        out.append(run_d())
    return out


if __name__ == "__main__":
    print(len(sweep((0.0, 0.01))))

# case: a handled step owning all but its key stream, called at module level
no_keys = fx.handle(step, weights.init(jnp.ones(3)), losses.discard(), lr.provide(jnp.float32(0.1)))
no_keys()  # E: effax-unhandled

"""`fx.Interceptor` subclasses: local and from the helper package, inherited and overridden."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx
from b6lib import interceptors as ic
from b6lib.budget import compute
from b6lib.effects import draws, dropout, learning_rate, losses, params, weight_decay
from b6lib.interceptors import LR_CAP, CappedLR, ConstantLR, CountedKeys, DroppedLosses, ScaledLosses
from b6lib.layers import drop, l2_penalty, report


@fx.uses(learning_rate)
def lr_value() -> jax.Array:
    return learning_rate.ask() * 1.0


@fx.uses(learning_rate, losses)
def lr_and_log() -> jax.Array:
    lr = learning_rate.ask()
    losses.emit(lr)
    return lr


# case: a forwarding subclass from the helper, its provider outside it
with learning_rate.provide(jnp.float32(0.3)), CappedLR(learning_rate, 0.05):
    capped = lr_value()
    capped_jit = fx.jit(lr_value)()
with learning_rate.provide(jnp.float32(0.3)), LR_CAP:
    capped_shared = fx.jit(lr_value)()

# case: the forwarding subclass alone, made here or held by the helper module
with CappedLR(learning_rate, 0.05):
    capped_bad = lr_value()  # E: effax-unhandled
with LR_CAP:
    capped_shared_bad = fx.jit(lr_value)()  # E: effax-unhandled

# case: a subclass of it overriding the operation to answer alone
with ConstantLR(learning_rate, 0.01):
    constant = lr_value()
    constant_jit = fx.jit(lr_value)()


# case: a local subclass answering every draw from a fixed key: it handles the stream
class FixedKeys(fx.Interceptor[fx.RandomKey]):
    def __init__(self, effect: fx.RandomKey, seed: int) -> None:
        super().__init__(effect, ())
        self.seed = seed

    def next_key(self) -> jax.Array:
        return jax.random.key(self.seed)


with FixedKeys(dropout, 42):
    same_mask = drop(jnp.ones(6))
    same_mask_jit = fx.jit(drop)(jnp.ones(6))


# case: a local subclass that forwards each draw after folding in nothing new
class PassKeys(fx.Interceptor[fx.RandomKey]):
    def next_key(self) -> jax.Array:
        return self.outer().next_key()


with PassKeys(dropout, ()):
    passed = drop(jnp.ones(6))  # E: effax-unhandled
with fx.handlers(dropout.seed(0), PassKeys(dropout, ())):
    passed_ok = drop(jnp.ones(6))


# case: subclasses of a helper class: one inherits its forwarding operation, one overrides it
class HalfLosses(ScaledLosses):
    def __init__(self, effect: fx.Emit[jax.Array]) -> None:
        super().__init__(effect, 0.5)


class LoudDropped(DroppedLosses):
    def emit(self, v: jax.Array) -> None:
        print("dropping", v)
        super().emit(v)


with losses.collect() as halved, HalfLosses(losses):
    report(jnp.float32(8.0))
with LoudDropped(losses, 1.0):
    report(jnp.float32(8.0))
    fx.jit(report)(jnp.float32(8.0))
with DroppedLosses(losses, 0.0):
    report(jnp.float32(1.0))

# case: the inherited forwarding operation with no collector outside
with HalfLosses(losses):
    report(jnp.float32(8.0))  # E: effax-unhandled
with ScaledLosses(losses, 3.0):
    fx.jit(report)(jnp.float32(8.0))  # E: effax-unhandled

# case: subclass interceptors in bundles and in fx.handle, over a cell
with fx.handlers(losses.collect(), ScaledLosses(losses, 2.0)) as bundle:
    report(jnp.float32(1.0))
scaled_report = fx.handle(report, losses.collect(), ScaledLosses(losses, 2.0), transform=jax.jit)
scaled_value = scaled_report(jnp.float32(1.0))

# case: fx.handle given the scaling subclass but no collector
scaled_report_bad = fx.handle(report, ScaledLosses(losses, 2.0), transform=jax.jit)
scaled_bad = scaled_report_bad(jnp.float32(1.0))  # E: effax-unhandled
with fx.handlers(HalfLosses(losses)):
    lr_and_log_bad = fx.handle(lr_and_log, learning_rate.provide(jnp.float32(0.1)))()  # E: effax-unhandled


# case: a key-counting subclass installed in a function whose row holds the counter
@fx.uses(dropout, draws)
def count_masks(x: jax.Array, n: int) -> list[jax.Array]:
    with CountedKeys(dropout, ()):
        return [drop(x) for _ in range(n)]


with fx.handlers(dropout.seed(0), draws.init(jnp.int32(0))) as counted:
    masks = count_masks(jnp.ones(3), 2)


# case: the key-counting subclass installed in a function whose row lacks the counter
@fx.uses(dropout)
def count_masks_narrow(x: jax.Array, n: int) -> list[jax.Array]:
    with CountedKeys(dropout, ()):
        return [drop(x) for _ in range(n)]  # E: effax-undeclared


with fx.handlers(dropout.seed(0), draws.init(jnp.int32(0))):
    masks_narrow = count_masks_narrow(jnp.ones(3), 2)


# case: a subclass whose operation spends from a custom budget installed outside it
class Metered(fx.Interceptor[fx.Emit[jax.Array]]):
    def emit(self, v: jax.Array) -> None:
        compute.spend(1.0)
        self.outer().emit(v)


with compute.wallet(10.0) as wallet, losses.collect(), Metered(losses, ()):
    report(jnp.float32(1.0))
    fx.jit(report)(jnp.float32(2.0))

# case: the budget installed inside the metering interceptor
with losses.collect(), Metered(losses, ()), compute.wallet(10.0):
    report(jnp.float32(1.0))  # E: effax-unhandled


# case: subclasses over a defaulted Ask: one answers, one forwards to a provider
class NoDecay(fx.Interceptor[fx.Ask[float]]):
    def ask(self) -> float:
        return 0.0


class MoreDecay(fx.Interceptor[fx.Ask[float]]):
    def ask(self) -> float:
        return 10.0 * self.outer().ask()


TREE = {"w": jnp.ones(3)}
with NoDecay(weight_decay, ()):
    no_decay = l2_penalty(TREE)
with weight_decay.provide(0.01), MoreDecay(weight_decay, ()):
    more_decay = fx.jit(l2_penalty)(TREE)

# case: the forwarding subclass over the defaulted Ask with no provider
with MoreDecay(weight_decay, ()):
    more_decay_bad = l2_penalty(TREE)  # E: effax-unhandled


# case: a subclass freezing one leaf of a State: it forwards get, set and modify
class FrozenW(fx.Interceptor[fx.State[dict[str, jax.Array]]]):
    def get(self) -> dict[str, jax.Array]:
        p = self.outer().get()
        return {**p, "w": jax.lax.stop_gradient(p["w"])}


@fx.uses(params)
def weighted_sum(x: jax.Array) -> jax.Array:
    p = params.get()
    return jnp.sum(x @ p["w"]) + jnp.sum(p["b"])


P = {"w": jnp.ones((3, 1)), "b": jnp.zeros(1)}
with params.init(P), FrozenW(params, ()):
    g = fx.grad(weighted_sum)(jnp.ones(3))

# case: the freezing subclass with no cell outside it
with FrozenW(params, ()):
    g_bad = fx.grad(weighted_sum)(jnp.ones(3))  # E: effax-unhandled


# case: an interceptor made by a function of this module (not seen through the call)
def capped_at(cap: float) -> CappedLR:
    return CappedLR(learning_rate, cap)


with learning_rate.provide(jnp.float32(1.0)), capped_at(0.1):
    capped_made = lr_value()
with capped_at(0.1):
    capped_made_bad = lr_value()  # limit: an interceptor returned by a function of yours: nothing under it is reported

# case: changing a parameter of the subclass retraces; each run under a provider
with learning_rate.provide(jnp.float32(0.5)):
    for cap in (0.1, 0.2, 0.3):
        with CappedLR(learning_rate, cap):
            fx.jit(lr_value)()

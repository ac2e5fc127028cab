"""Training loops built from the optics library: control flow, rows from tuples,
imported effects under other names, and a Trainer class."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

import effax as fx
import optics
from optics import effects as E
from optics.effects import LAYER_ROW
from optics.effects import losses as loss_log
from optics.effects import noise as rng_stream
from optics.layers import counted_update, jitter, report_loss, sgd_update

learning_rate = optics.lr  # an alias of an imported effect
w0 = jnp.ones(4)
g0 = jnp.full(4, 0.25)
xs = jnp.arange(6.0).reshape(3, 2)
SCAN_ROW = (*LAYER_ROW, loss_log)


@fx.uses(*SCAN_ROW)
def train_body(w: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    loss = report_loss(x)
    return counted_update(w, jnp.full_like(w, loss)), loss


# case: scan over a row body under every handler, compiled
with fx.handlers(learning_rate.provide(jnp.float32(0.1)), E.step_count.init(jnp.int32(0)), loss_log.collect()) as hs:
    w_final, per_step = fx.jit(lambda: fx.scan(train_body, w0, xs))()
print(hs[E.step_count], per_step)

# case: scan at module level without the emit handler
with learning_rate.provide(jnp.float32(0.1)), E.step_count.init(jnp.int32(0)):
    fx.scan(train_body, w0, xs)  # E: effax-unhandled

# case: a row built from a tuple spread, missing the emit, scanning the body
@fx.uses(*LAYER_ROW)
def train(w: jax.Array) -> jax.Array:
    out, _ = fx.scan(train_body, w, xs)  # E: effax-undeclared
    return out


with fx.handlers(learning_rate.provide(jnp.float32(0.1)), E.step_count.init(jnp.int32(0)), loss_log.collect()):
    train(w0)

# case: the same loop with the emit handled inside
@fx.uses(*LAYER_ROW)
def train_ok(w: jax.Array) -> tuple[jax.Array, list[jax.Array]]:
    with loss_log.collect() as col:
        out, _ = fx.scan(train_body, w, xs)
    return out, col.value


with fx.handlers(learning_rate.provide(jnp.float32(0.1)), E.step_count.init(jnp.int32(0))):
    train_ok(w0)

# case: fori_loop with a lambda body that draws keys, row lacking the stream
@fx.uses(learning_rate)
def noisy_descent(w: jax.Array) -> jax.Array:
    return fx.fori_loop(0, 3, lambda i, v: sgd_update(jitter(v), g0), w)  # E: effax-undeclared


with learning_rate.provide(jnp.float32(0.1)), rng_stream.seed(0):
    noisy_descent(w0)

# case: fori_loop with the aliased stream in the row
@fx.uses(learning_rate, optics.noise)
def noisy_descent_ok(w: jax.Array) -> jax.Array:
    return fx.fori_loop(0, 3, lambda i, v: sgd_update(jitter(v), g0), w)


with learning_rate.provide(jnp.float32(0.1)), rng_stream.seed(0):
    noisy_descent_ok(w0)
    fx.jit(noisy_descent_ok)(w0)

# case: while_loop whose cond reads a static Ask with a default, body counts
@fx.uses(E.step_count, E.temperature)
def until_hot(c: jax.Array) -> jax.Array:
    def body(v: jax.Array) -> jax.Array:
        E.step_count.modify(lambda n: n + 1)
        return v + 1.0

    return fx.while_loop(lambda v: v < 3.0 * E.temperature.ask(), body, c)


with E.step_count.init(jnp.int32(0)) as until_cell:
    until_hot(jnp.float32(0.0))
print(until_cell.value)

# case: while_loop at module level, the state unhandled
fx.while_loop(lambda v: v < 3.0, lambda v: v + E.step_count.modify(lambda n: n + 1).astype(jnp.float32), jnp.float32(0.0))  # E: effax-unhandled

# case: fx.map over examples performing the emit, at module level, handled
with loss_log.collect() as mapped:
    fx.map(report_loss, xs)
print(len(mapped.value))

# case: fx.map in a row lacking the emit
@fx.uses(learning_rate)
def eval_losses(batch: jax.Array) -> jax.Array:
    return fx.map(report_loss, batch) * learning_rate.ask()  # E: effax-undeclared


with loss_log.collect(), learning_rate.provide(jnp.float32(1.0)):
    eval_losses(xs)

# case: switch with branches from a list, all covered by the row
BRANCHES: list[Callable[[jax.Array], jax.Array]] = [lambda v: v, lambda v: 2.0 * v]


@fx.uses(learning_rate)
def pick(i: jax.Array, v: jax.Array) -> jax.Array:
    return fx.switch(i, BRANCHES, v) * learning_rate.ask()


with learning_rate.provide(jnp.float32(1.0)):
    pick(jnp.int32(1), w0)

# case: switch with lambda branches performing the state, row lacking it
@fx.uses(learning_rate)
def pick_counted(i: jax.Array, v: jax.Array) -> jax.Array:
    return fx.switch(i, [lambda u: u, lambda u: u * E.step_count.get()], v)  # E: effax-undeclared, no-any-return


with learning_rate.provide(jnp.float32(1.0)), E.step_count.init(jnp.int32(2)):
    pick_counted(jnp.int32(1), w0)

# case: a Trainer class whose methods have rows and call each other
class Trainer:
    name: ClassVar[str] = "sgd"

    def __init__(self, w: jax.Array) -> None:
        self.w = w

    @fx.uses(*LAYER_ROW)
    def step(self, g: jax.Array) -> jax.Array:
        self.w = counted_update(self.w, g)
        return self.w

    @fx.uses(*SCAN_ROW)
    def fit(self, batch: jax.Array) -> jax.Array:
        for x in batch:
            self.step(jnp.full_like(self.w, report_loss(x)))
        return self.w

    @fx.uses(learning_rate)
    def quick_fit(self, batch: jax.Array) -> jax.Array:
        return self.fit(batch)  # E: effax-undeclared

    @classmethod
    @fx.uses(rng_stream)
    def random_init(cls, n: int) -> Trainer:
        return cls(jax.random.normal(rng_stream.next_key(), (n,)))


trainer = Trainer(w0)
with fx.handlers(learning_rate.provide(jnp.float32(0.1)), E.step_count.init(jnp.int32(0)), loss_log.collect()):
    trainer.fit(xs)
    trainer.quick_fit(xs)

# case: a classmethod with a row called at module level
Trainer.random_init(4)  # E: effax-unhandled
with rng_stream.seed(0):
    Trainer.random_init(4)

# case: method call through a compiled bound method at module level
fast_fit = fx.jit(trainer.fit)
with fx.handlers(learning_rate.provide(jnp.float32(0.1)), E.step_count.init(jnp.int32(0)), loss_log.collect()):
    fast_fit(xs)
with learning_rate.provide(jnp.float32(0.1)), E.step_count.init(jnp.int32(0)):
    fast_fit(xs)  # E: effax-unhandled

# case: a module attribute access to an effect inside a row lacking it
@fx.uses(learning_rate)
def lr_and_noise(v: jax.Array) -> jax.Array:
    return v * learning_rate.ask() + jax.random.normal(optics.effects.noise.next_key())  # pyright: ignore[reportAttributeAccessIssue]  # E: effax-undeclared


with learning_rate.provide(jnp.float32(0.1)), rng_stream.seed(0):
    lr_and_noise(w0)

# case: an optimizer step handed to jax.value_and_grad inside a row that covers it
@fx.uses(*SCAN_ROW)
def loss_of(w: jax.Array, x: jax.Array) -> jax.Array:
    return report_loss(counted_update(w, g0) * x.sum())


@fx.uses(*SCAN_ROW)
def outer_step(w: jax.Array) -> jax.Array:
    value, grads = jax.value_and_grad(loss_of)(w, xs[0])
    return w - grads  # E: no-any-return


with fx.handlers(learning_rate.provide(jnp.float32(0.1)), E.step_count.init(jnp.int32(0)), loss_log.collect()):
    try:
        outer_step(w0)
    except fx.EffectLeakError:
        pass  # writing a state under jax.grad: use fx.value_and_grad

# case: fx.value_and_grad of the loss inside a row lacking the emit
@fx.uses(*LAYER_ROW)
def outer_step_bad(w: jax.Array) -> jax.Array:
    value, grads = fx.value_and_grad(loss_of)(w, xs[0])  # E: effax-undeclared
    return w - grads  # E: no-any-return


with fx.handlers(learning_rate.provide(jnp.float32(0.1)), E.step_count.init(jnp.int32(0)), loss_log.collect()):
    outer_step_bad(w0)

# case: a snapshot and restore between two runs of a handled step
cells: tuple[fx.Handler[Any], ...] = (learning_rate.provide(jnp.float32(0.1)), E.step_count.init(jnp.int32(0)))
resumable = fx.handle(counted_update, *cells, transform=jax.jit)
resumable(w0, g0)
saved = fx.snapshot(*cells)
resumable(w0, g0)
fx.restore(saved, *cells)
resumable(w0, g0)

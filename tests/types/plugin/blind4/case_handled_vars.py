"""Handled functions in variables, handler collections, reassignment and unpacking."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

import effax as fx
from optics import LAYER_ROW, losses, lr, noise, step_count
from optics.layers import counted_update, jitter, report_loss, sgd_update

w = jnp.ones(4)
g = jnp.full(4, 0.5)


# case: fx.handle leaves lr to the caller, stored in a variable
count_only = fx.handle(counted_update, step_count.init(jnp.int32(0)))
with lr.provide(jnp.float32(0.1)):
    count_only(w, g)
count_only(w, g)  # E: effax-unhandled

# case: fx.handle with every handler, called at module level
both = fx.handle(counted_update, lr.provide(jnp.float32(0.1)), step_count.init(jnp.int32(0)))
print(both(w, g))

# case: handled function variable reassigned to one that handles less
h = fx.handle(counted_update, lr.provide(jnp.float32(0.1)), step_count.init(jnp.int32(0)))
h(w, g)
h = fx.handle(counted_update, step_count.init(jnp.int32(0)))
h(w, g)  # E: effax-unhandled

# case: handled function variable reassigned to one that handles more
h2 = fx.handle(counted_update, step_count.init(jnp.int32(0)))
h2 = fx.handle(h2, lr.provide(jnp.float32(0.3)))
print(h2(w, g))

# case: handlers built as a list, spread into fx.handle
cells: list[fx.Handler[Any]] = [lr.provide(jnp.float32(0.1)), step_count.init(jnp.int32(0))]
spread = fx.handle(counted_update, *cells, transform=jax.jit)
spread(w, g)
spread(w, g)
print(cells[1].value)

# case: a list spread that misses one effect
partial_cells: list[fx.Handler[Any]] = [step_count.init(jnp.int32(0))]
with fx.handlers(*partial_cells):
    counted_update(w, g)  # E: effax-unhandled

# case: a tuple of handlers spread into fx.handlers
config = (lr.provide(jnp.float32(0.2)), step_count.init(jnp.int32(0)), losses.collect())
with fx.handlers(*config) as hs:
    counted_update(w, g)
    report_loss(w)
print(hs[step_count], hs[losses])

# case: tuple-unpacked handlers, both entered
provide_lr, init_steps = lr.provide(jnp.float32(0.1)), step_count.init(jnp.int32(0))
with provide_lr, init_steps:
    counted_update(w, g)

# case: tuple-unpacked handlers, only one entered
provide_lr2, init_steps2 = lr.provide(jnp.float32(0.1)), step_count.init(jnp.int32(0))
with init_steps2:
    counted_update(w, g)  # E: effax-unhandled

# case: a handler variable reassigned before the with
handler: fx.Handler[Any] = lr.provide(jnp.float32(0.1))
handler = step_count.init(jnp.int32(0))
with handler:
    sgd_update(w, g)  # E: effax-unhandled

# case: a handler variable reassigned to the right one
handler2: fx.Handler[Any] = step_count.init(jnp.int32(0))
handler2 = lr.provide(jnp.float32(0.1))
with handler2:
    sgd_update(w, g)

# case: walrus handler, then the cell read afterwards
with (steps_cell := step_count.init(jnp.int32(0))), lr.provide(jnp.float32(0.1)):
    counted_update(w, g)
print(steps_cell.value)

# case: jit of a row function stored in a variable, at module level
fast_update = fx.jit(counted_update)
with lr.provide(jnp.float32(0.1)):
    fast_update(w, g)  # E: effax-unhandled

# case: jit called inline, handlers installed
with fx.handlers(lr.provide(jnp.float32(0.1)), step_count.init(jnp.int32(0))):
    fx.jit(counted_update)(w, g)

# case: functools.partial of a row function at module level
step_with_g = functools.partial(counted_update, g=g)
with step_count.init(jnp.int32(0)):
    step_with_g(w)  # E: effax-unhandled

# case: functools.partial under both handlers
with fx.handlers(*(lr.provide(jnp.float32(0.1)), step_count.init(jnp.int32(0)))):
    step_with_g(w)

# case: jax.grad of a row function, kept in a variable, called without the stream
@fx.uses(noise)
def noisy_loss(v: jax.Array) -> jax.Array:
    return jnp.sum(jitter(v) ** 2)


grad_fn = jax.grad(noisy_loss)
grad_fn(w)  # E: effax-unhandled
with noise.seed(0):
    grad_fn(w)

# case: fx.value_and_grad of a row function under handlers
with noise.seed(0):
    value, grads = fx.value_and_grad(noisy_loss)(w)

# case: jax.tree.map over a row function at module level
params = {"a": w, "b": 2 * w}
jax.tree.map(jitter, params)  # E: effax-unhandled
with noise.seed(3):
    jax.tree.map(jitter, params)

# case: builtins map and sorted with row functions as keys
with noise.seed(0):
    jittered = list(map(jitter, [w, w]))
list(map(jitter, [w, w]))  # E: effax-unhandled

# case: sorted with a key that performs an effect
@fx.uses(lr)
def by_lr(v: jax.Array) -> float:
    return float(jnp.sum(v) * lr.ask())


sorted([w, g], key=by_lr)  # E: effax-unhandled
with lr.provide(jnp.float32(1.0)):
    sorted([w, g], key=by_lr)

# case: conditional callee inside a row function
@fx.uses(lr)
def pick_update(v: jax.Array, counted: bool) -> jax.Array:
    return (counted_update if counted else sgd_update)(v, g)  # E: effax-undeclared


with lr.provide(jnp.float32(0.1)), step_count.init(jnp.int32(0)):
    pick_update(w, True)

# case: conditional callee inside a row function, both sides covered
@fx.uses(*LAYER_ROW)
def pick_update_ok(v: jax.Array, counted: bool) -> jax.Array:
    return (counted_update if counted else sgd_update)(v, g)


with lr.provide(jnp.float32(0.1)), step_count.init(jnp.int32(0)):
    pick_update_ok(w, True)
    pick_update_ok(w, False)

# case: nested fx.handle inside a row function covers the missing effect
@fx.uses(lr)
def counted_inside(v: jax.Array) -> jax.Array:
    inner = fx.handle(counted_update, step_count.init(jnp.int32(0)))
    return inner(v, g)


with lr.provide(jnp.float32(0.1)):
    counted_inside(w)

# case: handle in a row function that covers the wrong effect
@fx.uses(step_count)
def counted_inside_bad(v: jax.Array) -> jax.Array:
    inner = fx.handle(counted_update, losses.collect())
    return inner(v, g)  # E: effax-undeclared


with lr.provide(jnp.float32(0.1)), step_count.init(jnp.int32(0)):
    counted_inside_bad(w)

# case: fx.grad of a handled function called inside a row function
@fx.uses(noise)
def grad_inside(v: jax.Array) -> jax.Array:
    gfn = fx.grad(fx.handle(noisy_loss, losses.collect()))
    return gfn(v)  # E: no-any-return


with noise.seed(0):
    grad_inside(w)

# case: fx.vmap of a row function inside a row function lacking the stream
@fx.uses(lr)
def batched_jitter(vs: jax.Array) -> jax.Array:
    return fx.vmap(jitter)(vs) * lr.ask()  # E: effax-undeclared


with lr.provide(jnp.float32(1.0)), noise.seed(0):
    batched_jitter(jnp.ones((3, 4)))

# case: a default argument value that performs an effect at definition
def make_step(scale: float = float(lr.ask())) -> float:  # E: effax-unhandled
    return scale

# case: a default argument value under a handler at definition
with lr.provide(jnp.float32(0.5)):

    def make_step_ok(scale: float = float(lr.ask())) -> float:
        return scale


print(make_step_ok())

# case: a default argument holding a handler, entered inside a pure entry point
@fx.uses()
def run_with(v: jax.Array, cell: fx.Handler[Any] = lr.provide(jnp.float32(0.1))) -> jax.Array:
    with cell:
        return sgd_update(v, g)


run_with(w)

# case: a nested def with a default performing an effect, inside a row lacking it
@fx.uses(lr)
def outer_with_default(v: jax.Array) -> jax.Array:
    def inner(scale: jax.Array = step_count.get()) -> jax.Array:  # E: effax-undeclared
        return v * scale

    return inner() * lr.ask()


with lr.provide(jnp.float32(0.1)), step_count.init(jnp.int32(2)):
    outer_with_default(w)

# case: handled function from a handlers bundle stored in a variable
lr_bundle = fx.handlers(lr.provide(jnp.float32(0.1)))
with lr_bundle:
    sgd_update(w, g)
with lr_bundle:
    counted_update(w, g)  # E: effax-unhandled

# case: a compiled handled function, inline, at module level
fx.handle(counted_update, step_count.init(jnp.int32(0)), transform=jax.jit)(w, g)  # E: effax-unhandled
with lr.provide(jnp.float32(0.1)):
    fx.handle(counted_update, step_count.init(jnp.int32(0)), transform=jax.jit)(w, g)

# case: a handled function with the wrong handler, called inside a pure entry point
@fx.uses()
def pure_update(v: jax.Array) -> jax.Array:
    hf = fx.handle(sgd_update, step_count.init(jnp.int32(0)))
    return hf(v, g)  # E: effax-undeclared


with lr.provide(jnp.float32(0.1)):
    pure_update(w)

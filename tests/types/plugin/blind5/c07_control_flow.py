"""Control flow and transformations: bodies with rows, lambdas bound to their operands."""

from __future__ import annotations

import sys

import equinox as eqx
import jax
import jax.numpy as jnp

import effax as fx
from b5lib.effects import dropout as drops
from b5lib.effects import losses as losslog
from b5lib.effects import steps as counter
from b5lib.effects import temperature as temp
from b5lib.layers import counted, noisy, report, scaled

v = jnp.array([0.5, 1.5])
FLAG = len(sys.argv) > 1000


class Scale(eqx.Module):
    """An Equinox module whose call asks the temperature."""

    w: jax.Array

    @fx.uses(temp)
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.w * x * temp.ask()


class Count(eqx.Module):
    w: jax.Array

    @fx.uses(counter)
    def __call__(self, x: jax.Array) -> jax.Array:
        counter.modify(lambda n: n + 1)
        return self.w * x


scale_mod = Scale(jnp.float32(2.0))
count_mod = Count(jnp.float32(3.0))

# case: effax.cond with an Equinox module as operand, its row covered
@fx.uses(temp)
def maybe_scale(go: jax.Array, x: jax.Array) -> jax.Array:
    return fx.cond(go, lambda m, u: m(u), lambda m, u: u, scale_mod, x)  # E: no-any-return


with temp.provide(jnp.float32(1.0)):
    print(maybe_scale(jnp.bool_(True), v), fx.jit(maybe_scale)(jnp.bool_(False), v))

# case: effax.cond with the module operand in a row that lacks its effect
@fx.uses(counter)
def maybe_scale_bad(go: jax.Array, x: jax.Array) -> jax.Array:
    return fx.cond(go, lambda m, u: m(u), lambda m, u: u, scale_mod, x)  # E: effax-undeclared, no-any-return


with fx.handlers(temp.provide(jnp.float32(1.0)), counter.init(jnp.int32(0))):
    maybe_scale_bad(jnp.bool_(True), v)

# case: effax.cond with the module operand at module level, nothing installed
fx.cond(True, lambda m, u: m(u), lambda m, u: u, count_mod, v)  # E: effax-unhandled

# case: effax.switch over lambdas bound to two module operands
@fx.uses(temp, counter)
def pick(i: jax.Array, x: jax.Array) -> jax.Array:
    return fx.switch(i, [lambda a, b, u: a(u), lambda a, b, u: b(u)], scale_mod, count_mod, x)  # E: no-any-return


@fx.uses(temp)
def pick_bad(i: jax.Array, x: jax.Array) -> jax.Array:
    return fx.switch(i, [lambda a, b, u: a(u), lambda a, b, u: b(u)], scale_mod, count_mod, x)  # E: effax-undeclared, no-any-return


with fx.handlers(temp.provide(jnp.float32(1.0)), counter.init(jnp.int32(0))) as pick_hs:
    print(pick(jnp.int32(1), v))
print(pick_hs[counter])
with fx.handlers(temp.provide(jnp.float32(1.0)), counter.init(jnp.int32(0))):
    pick_bad(jnp.int32(0), v)

# case: a fori_loop whose body calls a function with a larger row
@fx.uses(temp)
def repeat_scaled(x: jax.Array) -> jax.Array:
    return fx.fori_loop(0, 3, lambda i, c: scaled(c), x)


@fx.uses(temp)
def repeat_counted(x: jax.Array) -> jax.Array:
    return fx.fori_loop(0, 3, lambda i, c: counted(c), x)  # E: effax-undeclared


with fx.handlers(temp.provide(jnp.float32(0.5)), counter.init(jnp.int32(0))):
    print(repeat_scaled(v), fx.jit(repeat_scaled)(v))
    repeat_counted(v)

# case: an effax.scan body defined as a nested function
@fx.uses(drops, losslog)
def noisy_walk(x: jax.Array) -> jax.Array:
    def body(c: jax.Array, _: None) -> tuple[jax.Array, None]:
        c = report(noisy(c))
        return c, None

    return fx.scan(body, x, None, length=3)[0]


@fx.uses(drops)
def noisy_walk_bad(x: jax.Array) -> jax.Array:
    def body(c: jax.Array, _: None) -> tuple[jax.Array, None]:
        return report(noisy(c)), None

    return fx.scan(body, x, None, length=3)[0]  # E: effax-undeclared


with fx.handlers(drops.seed(0), losslog.collect()) as walk_hs:
    noisy_walk(v)
    fx.jit(noisy_walk)(v)
print(len(walk_hs[losslog]))
with fx.handlers(drops.seed(0), losslog.collect()):
    noisy_walk_bad(v)

# case: a while_loop whose cond_fun reads the temperature
limit_loop = lambda x: fx.while_loop(lambda c: jnp.sum(c) < 10 * temp.ask(), lambda c: c + 1.0, x)
with temp.provide(jnp.float32(1.0)):
    print(limit_loop(v))  # E: no-untyped-call

# case: a while_loop whose cond_fun reads the temperature (the failing use)
fx.while_loop(lambda c: jnp.sum(c) < 10 * temp.ask(), lambda c: c + 1.0, v)  # E: effax-unhandled

# case: effax.map over a function with a row
with temp.provide(jnp.float32(2.0)):
    print(fx.map(scaled, jnp.ones((2, 2))))

# case: effax.map over a function with a row (the failing use)
fx.map(scaled, jnp.ones((2, 2)))  # E: effax-unhandled

# case: jax.lax.scan calls its body at once: nothing installed
jax.lax.scan(lambda c, x: (c + scaled(x), None), jnp.zeros(2), jnp.ones((2, 2)))  # E: effax-unhandled

# case: jax.grad of a function with a row, read under the provider
@fx.uses(temp)
def energy(x: jax.Array) -> jax.Array:
    return jnp.sum(scaled(x) ** 2)


with temp.provide(jnp.float32(1.0)):
    print(jax.grad(energy)(v), jax.value_and_grad(energy)(v)[0])

# case: a gradient function kept in a variable and called with no provider
grad_fn = jax.grad(energy)
grad_fn(v)  # E: effax-unhandled

# case: jax.vmap of a function with a row, under the provider and without
batched = jax.vmap(scaled)
with temp.provide(jnp.float32(1.0)):
    print(batched(jnp.ones((2, 2))))

# case: jax.vmap of a function with a row, under the provider and without (the failing use)
batched(jnp.ones((2, 2)))  # E: effax-unhandled

# case: effax.vmap and effax.grad kept in variables
per_row = fx.vmap(noisy)
with drops.seed(1):
    print(per_row(jnp.ones((3, 2))))

# case: effax.vmap and effax.grad kept in variables (the failing use)
per_row(jnp.ones((3, 2)))  # E: effax-unhandled

# case: effax.value_and_grad through a State write
@fx.uses(temp, counter)
def counted_energy(x: jax.Array) -> jax.Array:
    return jnp.sum(counted(x) ** 2)


with fx.handlers(temp.provide(jnp.float32(1.0)), counter.init(jnp.int32(0))):
    print(fx.value_and_grad(counted_energy)(v))

# case: effax.value_and_grad through a State write (the failing use)
with temp.provide(jnp.float32(1.0)):
    fx.grad(counted_energy)(v)  # E: effax-unhandled

# case: effax.checkpoint of a function with a row
remat_scaled = fx.checkpoint(scaled)
with temp.provide(jnp.float32(1.0)):
    print(remat_scaled(v))

# case: effax.checkpoint of a function with a row (the failing use)
remat_scaled(v)  # E: effax-unhandled

# case: a conditional callee at module level inside a with
with temp.provide(jnp.float32(1.0)):
    print((scaled if FLAG else energy)(v))

# case: a conditional callee at module level inside a with (the failing use)
with counter.init(jnp.int32(0)):
    (counted if FLAG else scaled)(v)  # E: effax-unhandled

# case: a conditional callee inside a row that holds only one side's effects
@fx.uses(temp)
def either(x: jax.Array) -> jax.Array:
    return (scaled if FLAG else counted)(x)  # E: effax-undeclared


with fx.handlers(temp.provide(jnp.float32(1.0)), counter.init(jnp.int32(0))):
    either(v)

# case: Equinox filter_vmap of a module with a row
vm = eqx.filter_vmap(scale_mod)
with temp.provide(jnp.float32(1.0)):
    print(vm(jnp.ones((2, 2))))

# case: Equinox filter_vmap of a module with a row (the failing use)
vm(jnp.ones((2, 2)))  # E: effax-unhandled

# case: a compiled module call through eqx.filter_jit as the transform
filter_step = fx.handle(scale_mod, transform=eqx.filter_jit)
with temp.provide(jnp.float32(4.0)):
    print(filter_step(v))

# case: a compiled module call through eqx.filter_jit as the transform (the failing use)
filter_step(v)  # E: effax-unhandled

"""Random walks, losses and branches through effax's control flow and transforms."""

from __future__ import annotations

import functools as ft
from collections.abc import Callable

import jax
import jax.numpy as jnp

import effax as fx

noise = fx.RandomKey("noise")
scale = fx.Ask[jax.Array]("scale")
total = fx.State[jax.Array]("total")
trajectory = fx.Emit[jax.Array]("trajectory")
penalty = fx.Ask[jax.Array]("penalty")
calls = fx.State[jax.Array]("calls")


@fx.uses(noise, scale, total, trajectory)
def walk_step(x: jax.Array, _: None) -> tuple[jax.Array, None]:
    x = x + scale.ask() * fx.random.normal(stream=noise)
    total.set(total.get() + jnp.abs(x))
    trajectory.emit(x)
    return x, None


@fx.uses(noise, scale, total, trajectory)
def walk(n: int) -> jax.Array:
    final, _ = fx.scan(walk_step, jnp.zeros(()), None, length=n)
    return final


@fx.uses(scale, calls)
def loss(w: jax.Array) -> jax.Array:
    calls.modify(lambda n: n + 1)
    return scale.ask() * jnp.sum(w**2)


@fx.uses(penalty)
def reg(w: jax.Array) -> jax.Array:
    return penalty.ask() * jnp.sum(jnp.abs(w))


@fx.uses(scale)
def branch_a(x: jax.Array) -> jax.Array:
    return x * scale.ask()


@fx.uses(noise)
def branch_b(x: jax.Array) -> jax.Array:
    return x + fx.random.normal(x.shape, stream=noise)


@fx.uses(total)
def branch_c(x: jax.Array) -> jax.Array:
    total.set(total.get() + jnp.sum(x))
    return x


@fx.uses(noise, calls)
def retry_body(state: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
    i, _ = state
    calls.modify(lambda n: n + 1)
    return i + 1, fx.random.normal(stream=noise)


remat_reg = fx.checkpoint(reg)
compiled_walk = fx.handle(walk, trajectory.discard(), transform=ft.partial(jax.jit, static_argnums=0))


# case: a walk whose row covers the scan body
@fx.uses(noise, scale, total, trajectory)
def walk_twice(n: int) -> jax.Array:
    first, _ = fx.scan(walk_step, jnp.zeros(()), None, length=n)
    return first + walk(n)


# case: the scan body emits, the row does not say so
@fx.uses(noise, scale, total)
def walk_quiet(n: int) -> jax.Array:
    final, _ = fx.scan(walk_step, jnp.zeros(()), None, length=n)  # E: effax-undeclared
    return final


# case: the emits discarded locally
@fx.uses(noise, scale, total)
def walk_discard(n: int) -> jax.Array:
    with trajectory.discard():
        final, _ = fx.scan(walk_step, jnp.zeros(()), None, length=n)
    return final


# case: a fori_loop body that updates a declared state
@fx.uses(total)
def accumulate(n: int) -> jax.Array:
    def body(i: jax.Array, c: jax.Array) -> jax.Array:
        total.set(total.get() + i)
        return c + 1

    return fx.fori_loop(0, n, body, jnp.zeros(()))


# case: a fori_loop lambda reads a state outside the row
@fx.uses(scale)
def accumulate_wrong(n: int) -> jax.Array:
    return fx.fori_loop(0, n, lambda i, c: c + scale.ask() * total.get(), jnp.zeros(()))  # E: effax-undeclared


# case: a cond branch draws from a stream outside the row
@fx.uses(scale)
def maybe_noisy(x: jax.Array, flag: jax.Array) -> jax.Array:
    return fx.cond(flag, branch_a, branch_b, x)  # E: effax-undeclared


# case: a switch whose branches are all covered
@fx.uses(scale, noise, total)
def pick(i: jax.Array, x: jax.Array) -> jax.Array:
    out: jax.Array = fx.switch(i, [branch_a, branch_b, branch_c], x)
    return out


# case: a switch with one branch not covered
@fx.uses(scale, noise)
def pick_partial(i: jax.Array, x: jax.Array) -> jax.Array:
    out: jax.Array = fx.switch(i, [branch_a, branch_b, branch_c], x)  # E: effax-undeclared
    return out


# case: a while_loop body that counts outside the row
@fx.uses(noise)
def first_positive() -> jax.Array:
    _, x = fx.while_loop(lambda s: s[1] <= 0, retry_body, (jnp.zeros((), jnp.int32), jnp.full((), -1.0)))  # E: effax-undeclared
    return x


# case: a gradient under a row that covers the loss
@fx.uses(scale, calls)
def grad_norm(w: jax.Array) -> jax.Array:
    g: jax.Array = fx.grad(loss)(w)
    return jnp.sqrt(jnp.sum(g**2))


# case: value_and_grad of a loss that counts calls
@fx.uses(scale)
def loss_and_grad(w: jax.Array) -> tuple[jax.Array, jax.Array]:
    value, g = fx.value_and_grad(loss)(w)  # E: effax-undeclared
    return value, g


# case: a checkpointed regulariser whose penalty is not provided
@fx.uses(scale, calls)
def full_loss(w: jax.Array) -> jax.Array:
    return loss(w) + remat_reg(w)  # E: effax-undeclared


# case: the regulariser's penalty bound by effax.handle
@fx.uses(scale, calls)
def full_loss_bound(w: jax.Array) -> jax.Array:
    bound = fx.handle(reg, penalty.provide(jnp.float32(0.1)), transform=jax.jit)
    return loss(w) + bound(w)


# case: effax.handle binds the wrong effect
@fx.uses(scale)
def loss_bound_wrong(w: jax.Array) -> jax.Array:
    counted = fx.handle(loss, scale.provide(jnp.float32(2.0)))
    return counted(w)  # E: effax-undeclared


# case: an inline effax.jit of a branch outside the row
@fx.uses(noise)
def jitted_branch(x: jax.Array) -> jax.Array:
    return fx.jit(branch_a)(x)  # E: effax-undeclared


# case: effax.map with a lambda drawing from a declared stream
@fx.uses(noise)
def perturb_all(xs: jax.Array) -> jax.Array:
    return fx.map(lambda x: x + fx.random.normal(stream=noise), xs)


# case: effax.vmap of a branch whose stream is not declared
@fx.uses(scale)
def batch_noise(xs: jax.Array) -> jax.Array:
    return fx.vmap(branch_b, keys="split")(xs)  # E: effax-undeclared


# case: a comprehension of calls outside the row
@fx.uses(noise)
def scaled_all(xs: list[jax.Array]) -> list[jax.Array]:
    return [branch_a(x) for x in xs]  # E: effax-undeclared


# case: the compiled walk at module level
with fx.handlers(noise.seed(0), scale.provide(jnp.float32(0.5)), total.init(jnp.float32(0))) as walk_hs:
    compiled_walk(10)
print(walk_hs[total])


# case: the compiled walk without its total
with noise.seed(0), scale.provide(jnp.float32(0.5)):
    compiled_walk(10)  # E: effax-unhandled


# case: a gradient at module level without the call counter
with scale.provide(jnp.float32(3.0)):
    g0 = fx.grad(loss)(jnp.ones(3))  # E: effax-unhandled


# case: a lambda held in a variable, called outside the row
@fx.uses(scale)
def with_lambda(x: jax.Array) -> jax.Array:
    bump: Callable[[], jax.Array] = lambda: calls.modify(lambda n: n + 1)
    y = x * scale.ask()
    bump()  # E: effax-undeclared
    return y


# case: a nested def called outside the row
@fx.uses(scale)
def with_nested(x: jax.Array) -> jax.Array:
    def count() -> None:
        calls.modify(lambda n: n + 1)

    count()  # E: effax-undeclared
    return x * scale.ask()


# case: a nested def called under its handler
@fx.uses(scale)
def with_nested_ok(x: jax.Array) -> jax.Array:
    def count() -> None:
        calls.modify(lambda n: n + 1)

    with calls.init(jnp.int32(0)) as c:
        count()
        count()
    return x * scale.ask() + c.value

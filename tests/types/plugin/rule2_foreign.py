"""Rule 2 (issue 28): a named function with a row handed to a JAX transformation, a
third-party one or a builtin. A transformation (`jax.grad(f)`) returns a function
that performs `f`'s row where it is called; a higher-order function that calls at
once (`jax.lax.scan`, `map`, `sorted(key=...)`) performs it where it is called."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp

import effax as fx
from mylib import temperature

scale = fx.Ask[jax.Array]("scale")


@fx.uses(scale)
def loss(w: jax.Array) -> jax.Array:
    return jnp.sum(w**2) * scale.ask()


@fx.uses(scale)
def step(c: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    return c + x * scale.ask(), c


class Model(eqx.Module):
    w: jax.Array

    @fx.uses(scale)
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.w * x * scale.ask()


W = jnp.ones(3)


# case: JAX's transformations of a named function, called
@fx.uses()
def transformed() -> jax.Array:
    a = jax.grad(loss)(W)  # E: effax-undeclared: "grad(...)" performs effect "scale"
    b, c = jax.value_and_grad(loss)(W)  # E: effax-undeclared
    d = jax.checkpoint(loss)(W)  # E: effax-undeclared
    e = jax.vmap(loss)(W[None])  # E: effax-undeclared
    return jnp.asarray(a + b + c + d + e)


# case: builtins and JAX's loops call what they are given at once
@fx.uses()
def handed_over(xs: list[jax.Array]) -> list[jax.Array]:
    ys = list(map(loss, xs))  # E: effax-undeclared: "loss" performs effect "scale"
    ys = sorted(ys, key=loss)  # E: effax-undeclared
    jax.lax.scan(step, jnp.zeros(3), jnp.ones((2, 3)))  # E: effax-undeclared
    jax.tree.map(loss, {"a": W})  # E: effax-undeclared
    functools.reduce(lambda a, b: a + b, ys)
    return ys


# case: Equinox's transformations of a module and of a nested def
@fx.uses()
def equinox_style(model: Model) -> jax.Array:
    @fx.uses(scale)
    def inner(m: Model) -> jax.Array:
        return jnp.sum(m(W))

    value, grads = eqx.filter_value_and_grad(inner)(model)  # E: effax-undeclared
    return jnp.asarray(value + jnp.sum(eqx.filter_vmap(model)(W[None])))  # E: effax-undeclared


# case: under a handler, or in the row: nothing to report
@fx.uses(scale)
def in_row(xs: list[jax.Array], model: Model) -> jax.Array:
    total = jax.grad(loss)(W) + jnp.sum(jnp.stack(list(map(loss, xs))))
    return jnp.asarray(total + jnp.sum(eqx.filter_vmap(model)(W[None])))


@fx.uses()
def handled(xs: list[jax.Array]) -> jax.Array:
    with scale.provide(jnp.float32(2)):
        return jax.vmap(loss)(jnp.stack(xs)).sum() + jax.lax.scan(step, W, W[None])[0].sum()


# case: a transformation kept for later counts where it is called
grad_fn = jax.grad(loss)
value_fn = jax.value_and_grad(loss)
with scale.provide(jnp.float32(1)):
    grad_fn(W)
    value_fn(W)
grad_fn(W)  # E: effax-unhandled: "grad_fn" performs effect "scale" at module level


# case: at module level, handed over with no handler
jax.grad(loss)(W)  # E: effax-unhandled
list(map(loss, [W]))  # E: effax-unhandled: "loss" performs effect "scale" at module level
with scale.provide(jnp.float32(1)):
    list(map(loss, [W]))
    jax.checkpoint(loss)(W)


# case: data handed to a higher-order function is not called
model = Model(W)
pair = jax.tree.map(lambda a, b: a + b, model, model)
jax.lax.scan(lambda c, x: (c, x), model, None, length=2)
sorted([3, 1], key=abs)


# case: decorated with a JAX transformation over the row: the row stays
@jax.jit
@fx.uses(temperature)
def compiled_raw(x: float) -> float:
    return x * temperature.ask()


compiled_raw(1.0)  # E: effax-unhandled: "compiled_raw" performs effect "temperature"

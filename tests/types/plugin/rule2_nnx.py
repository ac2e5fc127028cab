"""Rule 2 (issue 41): `effax.nnx`'s twins of Flax NNX's transforms, with NNX's
signatures: `scan`, `vmap`, `remat`, `grad`, `value_and_grad` return a function that
performs what they were given where it is called; `cond`, `switch`, `fori_loop`,
`while_loop` perform their bodies' rows at once, as effax's own wrappers do."""

import jax
import jax.numpy as jnp
from flax import nnx

import effax as fx
import effax.nnx as fxn

count = fx.State[jax.Array]("count")
scale = fx.Ask[jax.Array]("scale")


@fx.uses(count)
def body(x: jax.Array, b: nnx.Linear) -> jax.Array:
    count.set(count.get() + 1)
    return b(x)


# case: a twin's function performs its body's row where it is called
@fx.uses(scale)
def scanned(blocks: nnx.Linear, x: jax.Array) -> jax.Array:
    scan_layers = fxn.scan(body, in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
    return scan_layers(x, blocks)  # E: effax-undeclared: "scan_layers" performs effect "count"


# case: a cond performs its branches' rows at once
@fx.uses(scale)
def branched(b: nnx.Linear, x: jax.Array) -> jax.Array:
    y: jax.Array = fxn.cond(True, body, lambda x, b: x, x, b)  # E: effax-undeclared: "body"
    return y


# case: a gradient performs what it differentiates
@fx.uses(scale)
def differentiated(b: nnx.Linear, x: jax.Array) -> jax.Array:
    loss_grad = fxn.grad(lambda b, x: jnp.sum(body(x, b)))
    g: jax.Array = loss_grad(b, x)  # E: effax-undeclared: "loss_grad" performs effect "count"
    return g


# case: in the row, nothing to report
@fx.uses(count)
def declared(blocks: nnx.Linear, x: jax.Array) -> jax.Array:
    y = fxn.scan(body, in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)(x, blocks)
    z = fxn.remat(body)(y, blocks)
    w = fxn.fori_loop(0, 2, lambda i, c: body(c, blocks), z)
    return fxn.switch(1, [body, body], w, blocks)


# case: handled by an enclosing with, nothing to report
@fx.uses(scale)
def handled(blocks: nnx.Linear, x: jax.Array) -> jax.Array:
    with count.init(jnp.int32(0)):
        y = fxn.vmap(body, in_axes=(0, None))(x, blocks)
        return fxn.while_loop(lambda c: jnp.sum(c) < 0, lambda c: body(c, blocks), y)


# case: lambdas calling the modules they are given (round 4): their parameters get the operands
class Noisy(nnx.Module):
    def __init__(self) -> None:
        self.linear = nnx.Linear(2, 2, rngs=nnx.Rngs(0))

    @fx.uses(count)
    def __call__(self, x: jax.Array) -> jax.Array:
        count.set(count.get() + 1)
        return self.linear(x)


noisy = Noisy()


@fx.uses(scale)
def calls_its_module(m: Noisy, x: jax.Array, go: jax.Array) -> jax.Array:
    a: jax.Array = fxn.cond(go, lambda mm, u: mm(u), lambda mm, u: u, m, x)  # E: effax-undeclared: "mm" performs effect "count"
    b: jax.Array = fxn.remat(lambda mm, u: mm(u))(m, x)  # E: effax-undeclared: performs effect "count"
    c: jax.Array = fxn.vmap(lambda mm, u: mm(u), in_axes=(None, 0))(m, x)  # E: effax-undeclared
    return a + b + c


@fx.uses(scale, count)
def calls_its_module_in_its_row(m: Noisy, x: jax.Array, go: jax.Array) -> jax.Array:
    a: jax.Array = fxn.cond(go, lambda mm, u: mm(u), lambda mm, u: u, m, x)
    b: jax.Array = fxn.remat(lambda mm, u: mm(u))(m, x)
    return a + b


with fx.handlers(scale.provide(jnp.float32(1.0))):
    fxn.fori_loop(0, 2, lambda i, c: (c[0], c[0](c[1])), (noisy, jnp.ones(2)))  # E: effax-unhandled
    fxn.remat(lambda mm, u: mm(u))(noisy, jnp.ones(2))  # E: effax-unhandled
with count.init(jnp.int32(0)):
    fxn.fori_loop(0, 2, lambda i, c: (c[0], c[0](c[1])), (noisy, jnp.ones(2)))
    fxn.remat(lambda mm, u: mm(u))(noisy, jnp.ones(2))
    fx.cond(True, lambda mm: mm(jnp.ones(2)), lambda mm: jnp.ones(2), noisy)
fx.cond(True, lambda mm: mm(jnp.ones(2)), lambda mm: jnp.ones(2), noisy)  # E: effax-unhandled


# case: a list of branches at module level, each bound to the operands (blind6)
with count.init(jnp.int32(0)):
    fxn.switch(1, [lambda mm, u: u, lambda mm, u: mm(u)], noisy, jnp.ones(2))
fxn.switch(1, [lambda mm, u: u, lambda mm, u: mm(u)], noisy, jnp.ones(2))  # E: effax-unhandled: "mm" performs effect "count"


# case: a module made by a function below the module's first hook: the call without a
# hook of its own is checked once mypy has inferred `made` (blind6)
def make_noisy() -> Noisy:
    return Noisy()


made = make_noisy()
with count.init(jnp.int32(0)):
    fxn.vmap(lambda mm, u: mm(u), in_axes=(None, 0))(made, jnp.ones((3, 2)))
fxn.vmap(lambda mm, u: mm(u), in_axes=(None, 0))(made, jnp.ones((3, 2)))  # E: effax-unhandled

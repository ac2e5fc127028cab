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

"""Rules 1 and 2 for `StateDict` (issue 27, item 1): `get` and `set` are its
operations, `init` makes its handler; an entry's value type is the declared one."""

import jax
import jax.numpy as jnp

import effax as fx

bn = fx.StateDict[jax.Array]("bn")
counts = fx.StateDict[int]("counts")


# case: operations inside a function whose row declares the effect
@fx.uses(bn)
def norm(x: jax.Array) -> jax.Array:
    mean = bn.get("mean", init=lambda: jnp.zeros(x.shape[-1]))
    bn.set("mean", 0.9 * mean + 0.1 * x)
    return x - mean


# case: operations outside the row
@fx.uses()
def undeclared(x: jax.Array) -> jax.Array:
    bn.set("seen", x)  # E: effax-undeclared: Effect "bn" is neither in the effect row
    return bn.get("mean")  # E: effax-undeclared


# case: module-level operations with and without a handler
bn.get("mean", init=jnp.zeros(2))  # E: effax-unhandled: Effect "bn" is performed at module level
with bn.init() as cell:
    bn.get("mean", init=jnp.zeros(2))
    norm(jnp.ones(2))
    fx.jit(norm)(jnp.ones(2))
with bn.init({"mean": jnp.zeros(2)}):
    bn.set("mean", jnp.ones(2))


# case: a function with the row called with no handler, and under one
norm(jnp.ones(2))  # E: effax-unhandled: "norm" performs effect "bn" at module level
fx.handle(norm, bn.init())(jnp.ones(2))
with fx.handlers(bn.init(), counts.init()):
    fx.scan(lambda c, x: (c + counts.get("n", init=0), norm(x)), 0, jnp.ones((3, 2)))


# case: the value type is checked by mypy itself
with counts.init():
    counts.set("n", "three")  # pyright: ignore[reportArgumentType]  # E: arg-type
    total: int = counts.get("n", init=lambda: 0) + 1

"""Raw JAX transforms, builtins and functools around functions that perform effects."""

import functools
import operator
from collections.abc import Callable

import jax
import jax.numpy as jnp

import effax as fx
from fxlib import dropout, scale, steps, temperature
from fxlib.ops import counted, scaled

XS = jnp.arange(3.0)

# case: jax.grad of a lambda reading an Ask declared in the row
@fx.uses(scale)
def curvature(w: jax.Array) -> jax.Array:
    return jnp.asarray(jax.grad(lambda v: scale.ask() * v**2)(w))

# case: jax.grad of a lambda reading an Ask missing from the row
@fx.uses()
def curvature_pure(w: jax.Array) -> jax.Array:
    return jnp.asarray(jax.grad(lambda v: scale.ask() * v**2)(w))  # E: effax-undeclared

# case: jax.vmap of a lambda calling a rowed layer, row covers it
@fx.uses(temperature)
def batched_scaled(xs: jax.Array) -> jax.Array:
    return jax.vmap(lambda x: scaled(x))(xs)

# case: jax.vmap of a lambda calling counted, steps not in the row
@fx.uses(temperature)
def batched_counted(xs: jax.Array) -> jax.Array:
    return jax.vmap(lambda x: counted(x))(xs)  # E: effax-undeclared

# case: jax.value_and_grad of a lambda with a dropout draw outside the row
@fx.uses(temperature)
def value_and_slope(w: jax.Array) -> tuple[jax.Array, jax.Array]:
    return jax.value_and_grad(lambda v: jnp.sum(scaled(v) * jax.random.normal(dropout.next_key(), v.shape)))(w)  # E: effax-undeclared

# case: jax.jit of a lambda that installs its handler inside
@fx.uses()
def jitted_inside(x: jax.Array, t: jax.Array) -> jax.Array:
    return jnp.asarray(jax.jit(lambda x, t: fx.handle(scaled, temperature.provide(t))(x))(x, t))

# case: jax.checkpoint of a lambda that seeds inside
@fx.uses()
def remat_inside(x: jax.Array) -> jax.Array:
    return jnp.asarray(jax.checkpoint(lambda x: fx.handle(lambda: x + fx.random.normal(), fx.rng.seed(0))())(x))

# case: a jax.jit-decorated pure entry point installing handlers
@jax.jit
@fx.uses()
def jit_entry(x: jax.Array, t: jax.Array) -> jax.Array:
    with fx.handlers(temperature.provide(t), steps.init(jnp.int32(0))):
        return counted(x)

# case: builtins map and sorted with lambdas inside the row
@fx.uses(temperature)
def ranked(xs: list[jax.Array]) -> list[jax.Array]:
    ys = list(map(lambda v: scaled(v), xs))
    return sorted(ys, key=lambda v: float(jnp.sum(scaled(v))))

# case: sorted by a key that counts steps, not in the row
@fx.uses(temperature)
def ranked_counted(xs: list[jax.Array]) -> list[jax.Array]:
    return sorted(xs, key=lambda v: float(jnp.sum(counted(v))))  # E: effax-undeclared

# case: functools.reduce with a lambda asking the scale, not in the row
@fx.uses(temperature)
def folded(xs: list[jax.Array]) -> jax.Array:
    return jnp.asarray(functools.reduce(lambda a, b: a + b * scale.ask(), xs, jnp.float32(0)))  # E: effax-undeclared

# case: functools.reduce with operator.add over scaled values, covered
@fx.uses(temperature)
def folded_ok(xs: list[jax.Array]) -> jax.Array:
    return functools.reduce(operator.add, [scaled(x) for x in xs])

# case: a partial applied later, with its row covered by a local handler
@fx.uses()
def partial_local(x: jax.Array) -> jax.Array:
    f = functools.partial(counted)
    with fx.handlers(temperature.provide(jnp.float32(1.0)), steps.init(jnp.int32(0))):
        return f(x)

# case: filter and any with lambdas calling a rowed layer outside the row
@fx.uses(steps)
def any_large(xs: list[jax.Array]) -> bool:
    big = list(filter(lambda v: bool(jnp.all(scaled(v) > 1)), xs))  # E: effax-undeclared
    return any(big)

# case: fx.grad and fx.checkpoint of a rowed lambda under a row that covers it
@fx.uses(temperature)
def smooth_grad(w: jax.Array) -> jax.Array:
    f = fx.checkpoint(fx.uses(temperature)(lambda v: jnp.sum(scaled(v) ** 2)))
    return jnp.asarray(fx.grad(f)(w))

# case: fx.grad of a rowed lambda that needs steps, row lacks it
@fx.uses(temperature)
def counted_grad(w: jax.Array) -> jax.Array:
    loss = fx.uses(temperature, steps)(lambda v: jnp.sum(counted(v)))
    return jnp.asarray(fx.grad(loss)(w))  # E: effax-undeclared

# case: a nested def held in a variable, called where steps is missing
@fx.uses(temperature)
def nested_caller(x: jax.Array) -> jax.Array:
    def inner(v: jax.Array) -> jax.Array:
        return counted(v)

    return inner(x)  # E: effax-undeclared

# case: a lambda held in a variable, called under the row that covers it
@fx.uses(temperature)
def lambda_caller(x: jax.Array) -> jax.Array:
    twice: Callable[[jax.Array], jax.Array] = lambda v: scaled(scaled(v))  # noqa: E731
    return twice(x)

# case: module level: jax.grad of a lambda asking the scale, no provider
g0 = jax.grad(lambda w: scale.ask() * w**2)(2.0)  # E: effax-unhandled

# case: module level: jax.grad under its provider
with scale.provide(3.0):
    g1 = jax.grad(lambda w: scale.ask() * w**2)(2.0)

# case: module level: jax.vmap of a lambda calling scaled, nothing provided
v0 = jax.vmap(lambda x: scaled(x))(XS)  # E: effax-unhandled

# case: module level: jax.jit of a lambda calling counted, nothing provided
j0 = jax.jit(lambda x: counted(x))(XS)  # E: effax-unhandled

# case: module level: jax.checkpoint of a lambda calling scaled, nothing provided
c0 = jax.checkpoint(lambda x: scaled(x))(XS)  # E: effax-unhandled

# case: module level: jax.value_and_grad of a lambda with a key draw, nothing seeded
vg0 = jax.value_and_grad(lambda w: w * fx.random.normal())(1.0)  # E: effax-unhandled

# case: module level: jax.vmap of the rowed function itself, nothing provided
v1 = jax.vmap(scaled)(XS)  # E: effax-unhandled

# case: module level: jax.vmap of scaled under its provider
with temperature.provide(jnp.float32(2.0)):
    v2 = jax.vmap(scaled)(XS)
    v3 = jax.vmap(lambda x: scaled(x) + 1)(XS)

# case: module level: builtins map over a rowed function, nothing provided
m0 = list(map(scaled, [XS, XS]))  # E: effax-unhandled

# case: module level: builtins map with a lambda, nothing provided
m1 = list(map(lambda v: scaled(v), [XS]))  # E: effax-unhandled

# case: module level: sorted with a key calling scaled, nothing provided
s0 = sorted([XS, XS + 1], key=lambda v: float(jnp.sum(scaled(v))))  # E: effax-unhandled

# case: module level: reduce folding scaled values, nothing provided
r0 = functools.reduce(lambda a, b: a + scaled(b), [XS, XS], jnp.zeros(3))  # E: effax-unhandled

# case: module level: a partial of counted called under temperature only
p0 = functools.partial(counted, XS)
with temperature.provide(jnp.float32(1.0)):
    p0()  # E: effax-unhandled

# case: module level: builtins and partials under every handler
with fx.handlers(temperature.provide(jnp.float32(1.0)), steps.init(jnp.int32(0))):
    print(len(list(map(counted, [XS]))), sorted([XS], key=lambda v: float(jnp.sum(counted(v))))[0], p0())

# case: module level: a list comprehension calling scaled, nothing provided
comp = [scaled(x) for x in [XS, XS]]  # E: effax-unhandled

# case: module level: sum over a generator of scaled values, nothing provided
summed = sum(jnp.sum(scaled(x)) for x in [XS])  # E: effax-unhandled, misc

# case: module level: max with a key lambda under the provider
with temperature.provide(jnp.float32(0.5)):
    biggest = max([XS, XS * 2], key=lambda v: float(jnp.sum(scaled(v))))

# case: module level: pure entries called with no handlers at all
print(jitted_inside(XS, jnp.float32(2.0)), remat_inside(XS), jit_entry(XS, jnp.float32(2.0)))

# case: module level: rowed helpers called without providers
curvature(jnp.float32(1.0))  # E: effax-unhandled
ranked([XS])  # E: effax-unhandled

if __name__ == "__main__":
    # case: main block drives the correct functions
    with fx.handlers(scale.provide(2.0), temperature.provide(jnp.float32(1.0))):
        print(curvature(jnp.float32(1.0)), batched_scaled(XS), ranked([XS, XS + 1])[0], folded_ok([XS, XS]))
        print(partial_local(XS), smooth_grad(XS), lambda_caller(XS))
    # case: main block drives curvature_pure
    with scale.provide(2.0): curvature_pure(jnp.float32(1.0))
    # case: main block drives batched_counted
    with fx.handlers(temperature.provide(jnp.float32(1.0)), steps.init(jnp.int32(0))): batched_counted(XS)
    # case: main block drives value_and_slope
    with fx.handlers(temperature.provide(jnp.float32(1.0)), dropout.seed(0)): value_and_slope(XS)
    # case: main block drives ranked_counted
    with fx.handlers(temperature.provide(jnp.float32(1.0)), steps.init(jnp.int32(0))): ranked_counted([XS, XS])
    # case: main block drives folded
    with fx.handlers(temperature.provide(jnp.float32(1.0)), scale.provide(2.0)): folded([XS, XS])
    # case: main block drives any_large
    with fx.handlers(temperature.provide(jnp.float32(1.0)), steps.init(jnp.int32(0))): any_large([XS])
    # case: main block drives counted_grad
    with fx.handlers(temperature.provide(jnp.float32(1.0)), steps.init(jnp.int32(0))): counted_grad(XS)
    # case: main block drives nested_caller
    with fx.handlers(temperature.provide(jnp.float32(1.0)), steps.init(jnp.int32(0))): nested_caller(XS)

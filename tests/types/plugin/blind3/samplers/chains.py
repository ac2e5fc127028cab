"""Several chains at once: fx.vmap policies, interceptors and handled kernels."""

import functools

import jax
import jax.numpy as jnp

import effax as fx
from samplers import log_density, mh_step, proposal_scale, samples_seen
from samplers.kernels import accepted, chain, mh_keys, mh_step_logged, step_size

draws_made = fx.State[jax.Array]("draws_made")

def folded(outer: fx.KeyStream) -> jax.Array:
    return jax.random.fold_in(outer.next_key(), 7)

count_draws = fx.intercept(fx.rng, next_key=folded)

# case: many chains with fx.vmap, the row covers the kernel
@fx.uses(proposal_scale, fx.rng)
def many_chains(x0s: jax.Array) -> jax.Array:
    return fx.vmap(lambda x0: chain(x0, 4), keys="split")(x0s)

# case: fx.vmap of a counting lambda, state batched, counter not declared
@fx.uses(fx.rng)
def batched_counts(xs: jax.Array) -> jax.Array:
    return fx.vmap(lambda x: samples_seen.modify(lambda s: s + x), state="batched")(xs)  # E: effax-undeclared

# case: an interceptor inside the row function still needs the stream declared
@fx.uses(proposal_scale, draws_made)
def counted_chain(x0: jax.Array) -> jax.Array:
    draws_made.modify(lambda n: n + 3)
    with count_draws:
        return chain(x0, 3)  # E: effax-undeclared

# case: the interceptor with the stream seeded inside
@fx.uses(proposal_scale, draws_made)
def counted_chain_seeded(x0: jax.Array) -> jax.Array:
    draws_made.modify(lambda n: n + 3)
    with fx.rng.seed(0), count_draws:
        return chain(x0, 3)

# case: a handled chain: fx.handle seeds the stream, the row lists the rest
@fx.uses(proposal_scale)
def handled_chain(x0: jax.Array) -> jax.Array:
    run = fx.handle(chain, fx.rng.seed(3))
    return run(x0, 3)

# case: fx.handle given the wrong stream for the kernel
@fx.uses(proposal_scale)
def handled_wrong_stream(x0: jax.Array) -> jax.Array:
    run = fx.handle(chain, mh_keys.seed(3))
    return run(x0, 3)  # E: effax-undeclared

# case: a partial of the chain with the length fixed
@fx.uses(proposal_scale, fx.rng)
def short_chain(x0: jax.Array) -> jax.Array:
    four = functools.partial(chain, n=4)
    return four(x0)

# case: fx.checkpoint around the kernel, called with the scale only
@fx.uses(proposal_scale)
def remat_step(x: jax.Array) -> jax.Array:
    step = fx.checkpoint(mh_step)
    return step(x, None)[0]  # E: effax-undeclared

# case: a gradient of the log density through an effect-free function
@fx.uses()
def score(x: jax.Array) -> jax.Array:
    return jnp.asarray(jax.grad(log_density)(x))

# case: per-chain step sizes under fx.vmap with the default Ask
@fx.uses(step_size)
def scaled_steps(xs: jax.Array) -> jax.Array:
    return jnp.asarray(fx.vmap(lambda x: x * step_size.ask())(xs))

# case: fx.vmap reading the step size outside the row
@fx.uses(fx.rng)
def noisy_steps(xs: jax.Array) -> jax.Array:
    return jnp.asarray(fx.vmap(lambda x: x * step_size.ask() + fx.random.normal())(xs))  # E: effax-undeclared

# case: fx.vmap of the logged kernel, the row lacks its stream
@fx.uses(proposal_scale, accepted)
def many_logged(x0s: jax.Array) -> jax.Array:
    return fx.vmap(lambda x: mh_step_logged(x, None)[0])(x0s)  # E: effax-undeclared

# case: module level: 3 chains seeded and scaled
with fx.handlers(proposal_scale.provide(jnp.float32(0.3)), fx.rng.seed(0)):
    print(many_chains(jnp.zeros((3, 2))).shape)

# case: module level: interceptor with no stream seeded outside it
with fx.handlers(proposal_scale.provide(jnp.float32(0.3)), draws_made.init(jnp.int32(0)), count_draws):
    chain(jnp.zeros(2), 2)  # E: effax-unhandled

# case: module level: interceptor inside the seeded stream
with fx.handlers(proposal_scale.provide(jnp.float32(0.3)), fx.rng.seed(0), draws_made.init(jnp.int32(0)), count_draws) as ch:
    chain(jnp.zeros(2), 2)
print("draws", ch[draws_made])

# case: module level: jax.vmap of a raw lambda drawing keys, nothing seeded
noise0 = jax.vmap(lambda x: x + fx.random.normal())(jnp.zeros(3))  # E: effax-unhandled

# case: module level: fx.vmap of the kernel without the scale
with fx.rng.seed(1):
    fx.vmap(lambda x: mh_step(x, None)[0])(jnp.zeros((2, 2)))  # E: effax-unhandled

# case: module level: acceptances collected around a handled scan of a rowed lambda
flip = fx.uses(accepted)(lambda c, _: (c, accepted.emit(c > 0)))
with accepted.collect() as acc:
    fx.handle(lambda: fx.scan(flip, jnp.float32(0), None, length=2))()
print(len(acc.value))

# case: module level: the rowed lambda scanned with no collector
fx.scan(flip, jnp.float32(0), None, length=2)  # E: effax-unhandled

if __name__ == "__main__":
    # case: main block drives the chain functions
    with fx.handlers(proposal_scale.provide(jnp.float32(0.3)), fx.rng.seed(0), draws_made.init(jnp.int32(0))):
        print(counted_chain_seeded(jnp.zeros(2)).shape, handled_chain(jnp.zeros(2)).shape, short_chain(jnp.zeros(2)).shape)
    print(score(jnp.ones(2)), scaled_steps(jnp.ones(2)))
    # case: main block drives batched_counts
    with fx.handlers(fx.rng.seed(0), samples_seen.init(jnp.zeros(3))): batched_counts(jnp.arange(3.0))
    # case: main block drives counted_chain
    with fx.handlers(proposal_scale.provide(jnp.float32(0.3)), fx.rng.seed(0), draws_made.init(jnp.int32(0))): counted_chain(jnp.zeros(2))
    # case: main block drives handled_wrong_stream
    with fx.handlers(proposal_scale.provide(jnp.float32(0.3)), fx.rng.seed(0)): handled_wrong_stream(jnp.zeros(2))
    # case: main block drives remat_step
    with fx.handlers(proposal_scale.provide(jnp.float32(0.3)), fx.rng.seed(0)): remat_step(jnp.zeros(2))
    # case: main block drives noisy_steps
    with fx.handlers(fx.rng.seed(0), step_size.provide(0.2)): noisy_steps(jnp.zeros(2))
    # case: main block drives many_logged
    with fx.handlers(proposal_scale.provide(jnp.float32(0.3)), mh_keys.seed(0), accepted.collect()): many_logged(jnp.zeros((2, 2)))

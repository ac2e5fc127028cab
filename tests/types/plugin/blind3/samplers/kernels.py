"""Metropolis-Hastings and Langevin kernels; keys come from effax streams."""

import jax
import jax.numpy as jnp

import effax as fx

proposal_scale = fx.Ask[jax.Array]("proposal_scale")
samples_seen = fx.State[jax.Array]("samples_seen")
accepted = fx.Emit[jax.Array]("accepted")
step_size = fx.Ask[float]("step_size", default=0.1)
mh_keys = fx.RandomKey("mh_keys")

def log_density(x: jax.Array) -> jax.Array:
    return -0.5 * jnp.sum(x**2)

# case: one MH step drawing from the default stream
@fx.uses(proposal_scale, fx.rng)
def mh_step(x: jax.Array, _: None) -> tuple[jax.Array, jax.Array]:
    proposal = x + proposal_scale.ask() * fx.random.normal(x.shape)
    accept = jnp.log(fx.random.uniform()) < log_density(proposal) - log_density(x)
    x = jnp.where(accept, proposal, x)
    return x, x

# case: an MH step on its own stream that emits acceptances, row complete
@fx.uses(proposal_scale, mh_keys, accepted)
def mh_step_logged(x: jax.Array, _: None) -> tuple[jax.Array, None]:
    proposal = x + proposal_scale.ask() * fx.random.normal(x.shape, stream=mh_keys)
    accept = jnp.log(fx.random.uniform(stream=mh_keys)) < log_density(proposal) - log_density(x)
    accepted.emit(accept)
    return jnp.where(accept, proposal, x), None

# case: a chain over fx.scan with the step's row declared
@fx.uses(proposal_scale, fx.rng)
def chain(x0: jax.Array, n: int) -> jax.Array:
    return fx.scan(mh_step, x0, None, length=n)[1]

# case: a chain that forgets the default stream of its step
@fx.uses(proposal_scale)
def chain_no_keys(x0: jax.Array) -> jax.Array:
    return fx.scan(mh_step, x0, None, length=4)[1]  # E: effax-undeclared

# case: a chain seeding the stream inside, so only the scale remains
@fx.uses(proposal_scale)
def seeded_chain(x0: jax.Array, seed: int) -> jax.Array:
    with fx.rng.seed(seed):
        return fx.scan(mh_step, x0, None, length=4)[1]

# case: counting samples in fori_loop with a lambda body
@fx.uses(samples_seen, fx.rng)
def count_draws(n: int) -> jax.Array:
    return fx.fori_loop(0, n, lambda i, c: c + fx.random.normal() + 0 * samples_seen.modify(lambda s: s + 1), jnp.asarray(0.0))

# case: a fori_loop body that counts samples not in the row
@fx.uses(fx.rng)
def count_draws_undeclared(n: int) -> jax.Array:
    return fx.fori_loop(0, n, lambda i, c: c + 0 * samples_seen.modify(lambda s: s + 1), jnp.asarray(0.0))  # E: effax-undeclared

# case: a Langevin walk in a while_loop with the default step size
@fx.uses(step_size, fx.rng)
def langevin_until(limit: float) -> jax.Array:
    def body(x: jax.Array) -> jax.Array:
        return x + step_size.ask() + 0.01 * fx.random.normal()

    return fx.while_loop(lambda x: x < limit, body, jnp.asarray(0.0))

# case: a while_loop whose condition reads an Ask outside the row
@fx.uses(fx.rng)
def walk_until_scale(x0: jax.Array) -> jax.Array:
    return fx.while_loop(lambda x: x < proposal_scale.ask(), lambda x: x + fx.random.uniform(), x0)  # E: effax-undeclared

# case: cond picking a branch that updates the counter
@fx.uses(samples_seen)
def maybe_count(x: jax.Array) -> jax.Array:
    return fx.cond(x > 0, lambda: samples_seen.modify(lambda s: s + 1), lambda: samples_seen.get())

# case: cond with a branch that emits, emit not in the row
@fx.uses(samples_seen)
def maybe_emit(x: jax.Array) -> None:
    fx.cond(x > 0, lambda: accepted.emit(x > 1), lambda: accepted.emit(x > 2))  # E: effax-undeclared

# case: switch over kernels, every branch's effects in the row
@fx.uses(proposal_scale, fx.rng)
def pick_kernel(i: jax.Array, x: jax.Array) -> jax.Array:
    return fx.switch(i, [lambda: x, lambda: mh_step(x, None)[0], lambda: x + fx.random.normal(x.shape)])

# case: switch where one branch uses mh_keys, not declared
@fx.uses(proposal_scale, fx.rng)
def pick_kernel_bad(i: jax.Array, x: jax.Array) -> jax.Array:
    return fx.switch(i, [lambda: x, lambda: x + fx.random.normal(x.shape, stream=mh_keys)])  # E: effax-undeclared

# case: fx.map over starting points, the row carries the stream
@fx.uses(fx.rng)
def jitter_all(xs: jax.Array) -> jax.Array:
    return fx.map(lambda x: x + fx.random.normal(), xs)

# case: fx.map of the logged step under a row that omits accepted
@fx.uses(proposal_scale, mh_keys)
def map_logged(xs: jax.Array) -> jax.Array:
    return fx.map(lambda x: mh_step_logged(x, None)[0], xs)  # E: effax-undeclared

# case: compiled chain at module level under its handlers
fast_chain = fx.jit(chain, static_argnums=1)
with proposal_scale.provide(jnp.float32(0.5)), fx.rng.seed(0):
    draws = fast_chain(jnp.zeros(2), 8)
print("mh mean", draws.mean())

# case: scan of the MH step at module level with no stream
with proposal_scale.provide(jnp.float32(0.5)):
    fx.scan(mh_step, jnp.zeros(2), None, length=3)  # E: effax-unhandled

# case: while_loop with the default step size and a seeded stream
with fx.rng.seed(1):
    print(langevin_until(1.0))

# case: while_loop at module level drawing from an unseeded stream
walked = fx.while_loop(lambda x: x < 1.0, lambda x: x + fx.random.uniform(), jnp.asarray(0.0))  # E: effax-unhandled

# case: fx.map at module level with a lambda asking the scale
with fx.rng.seed(2):
    jittered = fx.map(lambda x: x * proposal_scale.ask(), jnp.ones(3))  # E: effax-unhandled

# case: module level: kernels tried out without seeding or providing
mh_step(jnp.zeros(2), None)  # E: effax-unhandled
langevin_until(1.0)  # E: effax-unhandled
maybe_count(jnp.float32(1.0))  # E: effax-unhandled
with fx.rng.seed(0):
    count_draws(2)  # E: effax-unhandled

if __name__ == "__main__":
    # case: main block drives every kernel under handlers
    with fx.handlers(proposal_scale.provide(jnp.float32(0.5)), fx.rng.seed(0), samples_seen.init(jnp.int32(0)), mh_keys.seed(1), accepted.collect()):
        chain(jnp.zeros(2), 4)
        print(seeded_chain(jnp.zeros(2), 3).shape, count_draws(3), maybe_count(jnp.float32(1.0)))
        print(pick_kernel(jnp.int32(1), jnp.zeros(2)), jitter_all(jnp.zeros(3)))
        fx.scan(mh_step_logged, jnp.zeros(2), None, length=3)
    # case: main block drives chain_no_keys
    with fx.handlers(proposal_scale.provide(jnp.float32(0.5)), fx.rng.seed(0)): chain_no_keys(jnp.zeros(2))
    # case: main block drives count_draws_undeclared
    with fx.handlers(fx.rng.seed(0), samples_seen.init(jnp.int32(0))): count_draws_undeclared(3)
    # case: main block drives walk_until_scale
    with fx.handlers(fx.rng.seed(0), proposal_scale.provide(jnp.float32(0.5))): walk_until_scale(jnp.asarray(0.0))
    # case: main block drives maybe_emit
    with fx.handlers(samples_seen.init(jnp.int32(0)), accepted.collect()): maybe_emit(jnp.float32(2.0))
    # case: main block drives pick_kernel_bad
    with fx.handlers(proposal_scale.provide(jnp.float32(0.5)), fx.rng.seed(0), mh_keys.seed(0)): pick_kernel_bad(jnp.int32(1), jnp.zeros(2))
    # case: main block drives map_logged
    with fx.handlers(proposal_scale.provide(jnp.float32(0.5)), mh_keys.seed(0), accepted.collect()): map_logged(jnp.zeros((3, 2)))

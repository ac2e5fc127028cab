"""HMC and SGLD samplers for a 2-d Gaussian: key streams, loops and interceptors."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx
from b9lib.effects import draws, log, noise, steps

step_size = fx.Ask[jax.Array]("step_size")
accepted = fx.State[jax.Array]("accepted")
trace = fx.Emit[jax.Array]("trace")
precision = jnp.array([[2.0, 0.3], [0.3, 1.0]])

# case: log density and leapfrog integrator


@fx.uses()
def log_density(q: jax.Array) -> jax.Array:
    return -0.5 * q @ precision @ q


@fx.uses(step_size)
def leapfrog(q: jax.Array, p: jax.Array, n: int = 3) -> tuple[jax.Array, jax.Array]:
    eps = step_size.ask()
    grad = jax.grad(log_density)

    def body(i: jax.Array, qp: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        q_, p_ = qp
        p_ = p_ + 0.5 * eps * grad(q_)
        q_ = q_ + eps * p_
        return q_, p_ + 0.5 * eps * grad(q_)

    return fx.fori_loop(0, n, body, (q, p))


@fx.uses(step_size, noise, accepted, trace)
def hmc_step(q: jax.Array, _: None) -> tuple[jax.Array, None]:
    p0 = jax.random.normal(noise.next_key(), q.shape)
    q1, p1 = leapfrog(q, p0)
    log_ratio = log_density(q1) - 0.5 * p1 @ p1 - log_density(q) + 0.5 * p0 @ p0
    accept = jnp.log(jax.random.uniform(noise.next_key())) < log_ratio
    accepted.modify(lambda a: a + accept.astype(jnp.int32))
    q_new = jnp.where(accept, q1, q)
    trace.emit(q_new)
    return q_new, None


with fx.handlers(step_size.provide(jnp.float32(0.3)), noise.seed(0), accepted.init(jnp.int32(0)), trace.collect()) as hh:
    q_last, _ = fx.jit(lambda q: fx.scan(hmc_step, q, None, length=5))(jnp.zeros(2))

# case: chain without a step size

with fx.handlers(noise.seed(0), accepted.init(jnp.int32(0)), trace.collect()):
    fx.scan(hmc_step, jnp.zeros(2), None, length=2)  # E: effax-unhandled

# case: leapfrog outside the row of its caller


@fx.uses(noise)
def proposal(q: jax.Array) -> jax.Array:
    p = jax.random.normal(noise.next_key(), q.shape)
    return leapfrog(q, p)[0]  # E: effax-undeclared


with noise.seed(1), step_size.provide(jnp.float32(0.1)):
    proposal(jnp.zeros(2))

# case: counting draws with an interceptor


@fx.uses(noise)
def two_draws() -> jax.Array:
    return jax.random.normal(noise.next_key()) + jax.random.normal(noise.next_key())


def counted_next_key(outer: fx.KeyStream) -> jax.Array:
    draws.modify(lambda n: n + 1)
    return outer.next_key()


counting = fx.intercept(noise, next_key=counted_next_key)
with fx.handlers(draws.init(jnp.int32(0)), noise.seed(0)) as dh, counting:
    two_draws()
    fx.jit(two_draws)()

# case: the counting interceptor with no draws state outside it

with noise.seed(0), counting:
    two_draws()  # E: effax-unhandled

# case: the counter installed inside the interceptor instead of outside

with noise.seed(0), counting, draws.init(jnp.int32(0)):
    two_draws()  # E: effax-unhandled

# case: an interceptor that forwards with no stream outside

with counting, draws.init(jnp.int32(0)):
    two_draws()  # E: effax-unhandled, effax-unhandled

# case: a fixed-key interceptor answers alone

fixed = fx.intercept(noise, next_key=lambda outer: jax.random.key(42))
with fixed:
    deterministic = two_draws()

# case: SGLD with a while loop and a traced trip count

temperature_sgld = fx.Ask[jax.Array]("temperature_sgld")


@fx.uses(noise, temperature_sgld, steps)
def sgld(q0: jax.Array, tol: float = 0.05) -> jax.Array:
    grad = jax.grad(log_density)

    def cond_fun(q: jax.Array) -> jax.Array:
        return (jnp.linalg.norm(q) > tol) & (steps.get() < 10)  # E: no-any-return

    def body(q: jax.Array) -> jax.Array:
        steps.modify(lambda n: n + 1)
        eps = 0.1
        return q + 0.5 * eps * grad(q) + jnp.sqrt(eps) * temperature_sgld.ask() * jax.random.normal(noise.next_key(), q.shape)  # E: no-any-return

    return fx.while_loop(cond_fun, body, q0)


with fx.handlers(noise.seed(2), temperature_sgld.provide(jnp.float32(0.01)), steps.init(jnp.int32(0))) as sh:
    q_sgld = sgld(jnp.ones(2))

# case: SGLD from a function whose row forgets the step counter


@fx.uses(noise, temperature_sgld)
def sgld_chains(q0s: list[jax.Array]) -> list[jax.Array]:
    return [sgld(q) for q in q0s]  # E: effax-undeclared


with fx.handlers(noise.seed(2), temperature_sgld.provide(jnp.float32(0.01)), steps.init(jnp.int32(0))):
    sgld_chains([jnp.ones(2)])

# case: parallel chains with vmap and split keys

with fx.handlers(step_size.provide(jnp.float32(0.2)), noise.seed(3), accepted.init(jnp.zeros(3, jnp.int32)), trace.collect()) as ph:
    chains = fx.vmap(lambda q: hmc_step(q, None)[0], keys="split", state="batched")(jnp.zeros((3, 2)))

# case: random-walk metropolis with keyless samplers


@fx.uses(fx.rng, accepted)
def rw_step(q: jax.Array, _: None) -> tuple[jax.Array, None]:
    prop = q + 0.5 * fx.random.normal(q.shape)
    ok = jnp.log(fx.random.uniform()) < log_density(prop) - log_density(q)
    accepted.modify(lambda a: a + ok.astype(jnp.int32))
    return jnp.where(ok, prop, q), None


with fx.rng.seed(5), accepted.init(jnp.int32(0)) as acc_cell:
    fx.scan(rw_step, jnp.zeros(2), None, length=4)

# case: random walk with the default stream but no counter

with fx.rng.seed(5):
    fx.scan(rw_step, jnp.zeros(2), None, length=4)  # E: effax-unhandled

# case: logging each accepted proposal through an emit interceptor


@fx.uses(log)
def note(v: float) -> None:
    log.emit(v)


scaled_log = fx.intercept(log, emit=lambda outer, v: outer.emit(v / 10))
with log.collect() as notes, scaled_log:
    note(3.0)

# case: scaled log interceptor with no collector

with scaled_log:
    note(4.0)  # E: effax-unhandled

# case: silencing interceptor answers emits alone

muted = fx.intercept(log, emit=lambda outer, v: None)
with muted:
    note(5.0)

# case: an interceptor answering get alone, then a set forwarded to nothing

pinned_steps = fx.intercept(steps, get=lambda outer: jnp.int32(0))
with pinned_steps:
    steps.get()
    steps.set(jnp.int32(3))  # limit: an interceptor answering one operation alone counts as handling the effect

# case: interceptor installed inside a function with a row


@fx.uses(noise)
def counted_draws() -> jax.Array:
    with counting:
        return two_draws()  # E: effax-undeclared


with fx.handlers(draws.init(jnp.int32(0)), noise.seed(0)):
    counted_draws()

# case: interceptor inside a function whose row holds the counter


@fx.uses(noise, draws)
def counted_draws_ok() -> jax.Array:
    with counting:
        return two_draws()


with fx.handlers(draws.init(jnp.int32(0)), noise.seed(0)) as cd:
    counted_draws_ok()

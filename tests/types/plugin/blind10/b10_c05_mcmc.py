"""Langevin dynamics and Hamiltonian Monte Carlo on a 2-D banana-shaped target."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

import effax as fx

step_size = fx.Ask[jax.Array]("step_size")
inv_temp = fx.Ask[jax.Array]("inv_temp")
n_leapfrog = fx.Ask[int]("n_leapfrog", static=True, default=3)
accepts = fx.State[jax.Array]("accepts")
chain = fx.Emit[jax.Array]("chain")
X0 = jnp.array([0.5, -0.5])


def log_prob(x: jax.Array) -> jax.Array:
    return -0.5 * (x[0] ** 2 / 4.0 + (x[1] - 0.25 * x[0] ** 2) ** 2)


@fx.uses(step_size, fx.rng)
def langevin_step(x: jax.Array) -> jax.Array:
    eta = step_size.ask()
    return x + eta * jax.grad(log_prob)(x) + jnp.sqrt(2 * eta) * fx.random.normal(x.shape)  # E: no-any-return


@fx.uses(step_size, n_leapfrog)
def leapfrog(x: jax.Array, p: jax.Array) -> tuple[jax.Array, jax.Array]:
    eta = step_size.ask()

    def body(i: int, xp: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        x_, p_ = xp
        p_ = p_ + 0.5 * eta * jax.grad(log_prob)(x_)
        x_ = x_ + eta * p_
        return x_, p_ + 0.5 * eta * jax.grad(log_prob)(x_)

    return fx.fori_loop(0, n_leapfrog.ask(), body, (x, p))


@fx.uses(step_size, n_leapfrog, fx.rng, accepts)
def hmc_step(x: jax.Array) -> jax.Array:
    p = fx.random.normal(x.shape)
    x2, p2 = leapfrog(x, p)
    log_acc = log_prob(x2) - 0.5 * p2 @ p2 - log_prob(x) + 0.5 * p @ p
    ok = jnp.log(fx.random.uniform()) < log_acc
    accepts.modify(lambda n: n + ok.astype(jnp.int32))
    return jnp.where(ok, x2, x)


# case: a Langevin chain by scan, each state emitted
@fx.uses(step_size, fx.rng, chain)
def langevin_chain(x: jax.Array, n: int) -> jax.Array:
    def body(c: jax.Array, _: None) -> tuple[jax.Array, None]:
        c = langevin_step(c)
        chain.emit(c)
        return c, None

    return fx.scan(body, x, None, length=n)[0]


with fx.handlers(step_size.provide(jnp.float32(0.05)), fx.rng.seed(0), chain.collect()) as hs:
    langevin_chain(X0, 6)
print(hs[chain][0].shape)

# case: one Langevin step with no step size
with fx.rng.seed(0):
    langevin_step(X0)  # E: effax-unhandled

# case: HMC by a compiled fori_loop; n_leapfrog's default answers
hmc_run = fx.jit(lambda x: fx.fori_loop(0, 5, lambda i, c: hmc_step(c), x))
with fx.handlers(step_size.provide(jnp.float32(0.1)), fx.rng.seed(1), accepts.init(jnp.int32(0))) as hs:
    print(hmc_run(X0), hs[accepts])

# case: HMC with the acceptance counter missing
with step_size.provide(jnp.float32(0.1)), fx.rng.seed(1):
    hmc_step(X0)  # E: effax-unhandled

# case: four chains, one key per chain
with fx.handlers(step_size.provide(jnp.float32(0.1)), fx.rng.seed(2), accepts.init(jnp.int32(0))):
    xs = fx.vmap(langevin_step)(jnp.tile(X0, (4, 1)))
print(xs.shape)

# case: JAX's own vmap of the Langevin step, with no stream installed
with step_size.provide(jnp.float32(0.1)):
    jax.vmap(langevin_step)(jnp.tile(X0, (4, 1)))  # E: effax-unhandled

# case: a default argument that asks the inverse temperature where the def runs
with inv_temp.provide(jnp.float32(0.5)):

    def tempered(x: jax.Array, beta: jax.Array = inv_temp.ask()) -> jax.Array:
        return beta * log_prob(x)


print(tempered(X0))


# case: the same default argument at module level, with nothing installed
def tempered_bad(x: jax.Array, beta: jax.Array = inv_temp.ask()) -> jax.Array:  # E: effax-unhandled
    return beta * log_prob(x)


# case: a lambda held in a variable, called under its handler
energy_fn = lambda x: -log_prob(x) * inv_temp.ask()  # noqa: E731
with inv_temp.provide(jnp.float32(2.0)):
    print(energy_fn(X0))  # E: no-untyped-call

# case: the lambda called at module level with no handler
energy_fn(X0)  # E: effax-unhandled, no-untyped-call


# case: a nested proposal with its own row, called from a sampler whose row lacks the stream
@fx.uses(step_size)
def mala_proposal(x: jax.Array) -> jax.Array:
    @fx.uses(fx.rng)
    def kick(shape: tuple[int, ...]) -> jax.Array:
        return fx.random.normal(shape)

    return x + step_size.ask() * kick(x.shape)  # E: effax-undeclared


with step_size.provide(jnp.float32(0.1)), fx.rng.seed(3):
    mala_proposal(X0)

# case: a checkpointed Langevin step kept in a variable, under its handlers
remat_step = fx.checkpoint(langevin_step)
with step_size.provide(jnp.float32(0.05)), fx.rng.seed(4):
    print(remat_step(X0))


# case: the checkpointed step from a function whose row omits the stream
@fx.uses(step_size)
def two_steps(x: jax.Array) -> jax.Array:
    return remat_step(remat_step(x))  # E: effax-undeclared


with step_size.provide(jnp.float32(0.05)), fx.rng.seed(4):
    two_steps(X0)

# case: a partial of the HMC step at module level, stream missing
hmc_partial = functools.partial(hmc_step)
with step_size.provide(jnp.float32(0.1)), accepts.init(jnp.int32(0)):
    hmc_partial(X0)  # E: effax-unhandled


# case: adaptive step size: halve it by while_loop until a proposal stays finite
@fx.uses(step_size, fx.rng)
def adapt(x: jax.Array) -> jax.Array:
    def cond_fn(eta: jax.Array) -> jax.Array:
        return eta > step_size.ask() / 8

    def body_fn(eta: jax.Array) -> jax.Array:
        return eta / 2 + 0.0 * fx.random.uniform()

    return fx.while_loop(cond_fn, body_fn, jnp.asarray(1.0))


with step_size.provide(jnp.float32(0.5)), fx.rng.seed(0) as st:
    print(adapt(X0), st.value.counter)

# case: the adaptive loop with the stream but no step size
with fx.rng.seed(0):
    adapt(X0)  # E: effax-unhandled


# case: a pure entry point installing every handler inside, compiled by JAX
@fx.uses()
def sample_entry(x: jax.Array, seed: jax.Array) -> jax.Array:
    with step_size.provide(jnp.float32(0.05)), fx.rng.seed(seed), accepts.init(jnp.int32(0)):
        return hmc_step(x)  # E: effax-undeclared


print(jax.jit(sample_entry)(X0, jnp.int32(7)))


# case: a pure entry point that forgets the acceptance counter
@fx.uses()
def sample_entry_bad(x: jax.Array) -> jax.Array:
    with step_size.provide(jnp.float32(0.05)), fx.rng.seed(0):
        return hmc_step(x)  # E: effax-undeclared


with accepts.init(jnp.int32(0)):
    sample_entry_bad(X0)


# case: a leapfrog integrator called from a row that omits n_leapfrog, no provider anywhere
@fx.uses(step_size)
def leapfrog_energy(x: jax.Array) -> jax.Array:
    x2, p2 = leapfrog(x, jnp.ones_like(x))  # E: effax-undeclared
    return -log_prob(x2) + 0.5 * p2 @ p2


with step_size.provide(jnp.float32(0.05)):
    leapfrog_energy(X0)

# case: a tempered sampler picking its inverse temperature by a conditional handler
hot = False
with inv_temp.provide(jnp.float32(0.1)) if hot else inv_temp.provide(jnp.float32(1.0)):
    print(energy_fn(X0))  # E: no-untyped-call

# case: the sampler's key drawn with fx.random.gumbel and exponential, default stream
with fx.rng.seed(9) as rs:
    g, e = fx.random.gumbel((2,)), fx.random.exponential((2,))
print(g + e, rs.value.counter)

# case: gamma draws from the default stream with nothing installed
fx.random.gamma(jnp.ones(2))  # E: effax-unhandled

# case: the HMC step given to JAX's scan eagerly, with no handler at all
jax.lax.scan(lambda c, _: (hmc_step(c), None), X0, None, length=2)  # E: effax-unhandled


# case: a sampler object whose step size lives in a state, set through a property
eta_state = fx.State[jax.Array]("eta_state")


class Sampler:
    @property
    @fx.uses(eta_state)
    def eta(self) -> jax.Array:
        return eta_state.get()

    @eta.setter
    @fx.uses(eta_state)
    def eta(self, v: jax.Array) -> None:
        eta_state.set(v)

    @fx.uses(eta_state, fx.rng)
    def step(self, x: jax.Array) -> jax.Array:
        with step_size.provide(self.eta):
            return langevin_step(x)


sampler = Sampler()
with eta_state.init(jnp.float32(0.1)), fx.rng.seed(0):
    sampler.eta = jnp.float32(0.05)
    print(sampler.step(X0))

# case: the step-size property assigned at module level with no state cell
sampler.eta = jnp.float32(0.2)  # E: effax-unhandled

# case: the step-size property read at module level with no state cell
print(sampler.eta)  # E: effax-unhandled

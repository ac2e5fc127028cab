"""Bayesian linear regression with a custom effect: the model adds log-density terms
to a `Ledger`, Metropolis-Hastings chains run under effax.scan and effax.vmap, and
interceptors temper or mute the likelihood."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy import stats

import effax as fx
from b8lib.custom import Muted, Scaled, cost, log_density

position = fx.State[jax.Array]("position")
mh_keys = fx.RandomKey("mh_keys")
step_size = fx.Ask[float]("step_size", default=0.3)
observations = fx.Ask[tuple[jax.Array, jax.Array]]("observations")
evals = fx.State[jax.Array]("evals")
acceptance = fx.State[float]("acceptance")

X = jnp.linspace(-1.0, 1.0, 12)[:, None]
Y = 2.0 * X[:, 0] - 0.5 + 0.1 * jnp.sin(7.0 * X[:, 0])
DATA = (X, Y)


# case: the model adds its prior and likelihood terms to the ledger
@fx.uses(log_density, observations)
def model(theta: jax.Array) -> None:
    x, y = observations.ask()
    log_density.add(jnp.sum(stats.norm.logpdf(theta, 0.0, 2.0)))
    pred = x[:, 0] * theta[0] + theta[1]
    log_density.add(jnp.sum(stats.norm.logpdf(y, pred, 0.1)))


with observations.provide(DATA), log_density.open() as ledger:
    model(jnp.array([2.0, -0.5]))
print("log joint at truth", float(ledger.value))


# case: a pure entry point opens its own ledger and returns the total
@fx.uses(observations)
def log_joint(theta: jax.Array) -> jax.Array:
    with log_density.open() as cell:
        model(theta)
    return cell.value


with observations.provide(DATA):
    lp = fx.jit(log_joint)(jnp.zeros(2))


# case: a Metropolis-Hastings transition of the position, drawing two keys
@fx.uses(position, mh_keys, step_size, observations)
def mh_step() -> jax.Array:
    u = position.get()
    proposal = u + step_size.ask() * fx.random.normal(u.shape, stream=mh_keys)
    log_ratio = log_joint(proposal) - log_joint(u)
    accept = jnp.log(fx.random.uniform(stream=mh_keys)) < log_ratio
    new = jnp.where(accept, proposal, u)
    position.set(new)
    return new


@fx.uses(position, mh_keys, step_size, observations)
def run_chain(n: int) -> jax.Array:
    return fx.scan(lambda c, _: (c, mh_step()), None, length=n)[1]


with fx.handlers(position.init(jnp.zeros(2)), mh_keys.seed(0), observations.provide(DATA)) as hs:
    samples = fx.jit(run_chain, static_argnums=0)(50)
print("posterior mean", samples[25:].mean(axis=0), "keys", hs[mh_keys].counter)


# case: a transition that scores the model directly but leaves the ledger out of its row
@fx.uses(position, mh_keys, step_size, observations)
def mh_step_direct() -> jax.Array:
    u = position.get()
    proposal = u + step_size.ask() * fx.random.normal(u.shape, stream=mh_keys)
    model(proposal)  # E: effax-undeclared
    return proposal


with fx.handlers(position.init(jnp.zeros(2)), mh_keys.seed(1), observations.provide(DATA), log_density.open()):
    mh_step_direct()


# case: four chains, each with its own key stream and its own row of the position
@fx.uses(position, mh_keys, step_size, observations)
def many_chains(n: int) -> jax.Array:
    return fx.vmap(lambda: run_chain(n), keys="split", state="batched")()


with fx.handlers(position.init(jnp.zeros((4, 2))), mh_keys.seed(2), observations.provide(DATA)):
    chains = fx.jit(many_chains, static_argnums=0)(20)
print("chains", chains.shape)


# case: the chains run at module level with the position and data but no key stream
with position.init(jnp.zeros((4, 2))), observations.provide(DATA):
    chains_bad = many_chains(5)  # E: effax-unhandled


# case: a tempered likelihood: the Scaled interceptor forwards to a ledger outside it
@fx.uses(observations)
def tempered_log_joint(theta: jax.Array, beta: float) -> jax.Array:
    with log_density.open() as cell, Scaled(log_density, beta):
        model(theta)
    return cell.value


with observations.provide(DATA):
    print("tempered", float(tempered_log_joint(jnp.zeros(2), 0.25)))


# case: the tempering interceptor installed at module level with no ledger outside it
with observations.provide(DATA), Scaled(log_density, 0.5):
    model(jnp.zeros(2))  # E: effax-unhandled


# case: Muted answers every addition itself, so no ledger is needed
with observations.provide(DATA), Muted(log_density, ()):
    model(jnp.zeros(2))


# case: fx.intercept doubling the terms, forwarded to nothing
doubled = fx.intercept(log_density, add=lambda outer, a: outer.add(2.0 * a))
with observations.provide(DATA), doubled:
    model(jnp.ones(2))  # E: effax-unhandled


# case: an interceptor that drops the terms without calling outer handles the ledger
dropped = fx.intercept(log_density, add=lambda outer, a: None)
with observations.provide(DATA), dropped:
    model(jnp.ones(2))
    fx.jit(model)(jnp.ones(2))


# case: prior predictive draws with fx.map over the default stream
@fx.uses(fx.rng)
def prior_predictive(x: jax.Array) -> jax.Array:
    theta = 2.0 * fx.random.normal((2,))
    return x * theta[0] + theta[1]


with fx.rng.seed(3):
    ys = fx.map(prior_predictive, jnp.linspace(-1.0, 1.0, 5))


# case: a cost model charges evaluations to a ledger its row does not name
@fx.uses(observations)
def charged_log_joint(theta: jax.Array) -> jax.Array:
    cost.add(1.0)  # E: effax-undeclared
    return log_joint(theta)


with observations.provide(DATA), cost.open():
    charged_log_joint(jnp.zeros(2))


# case: the interceptor counts evaluations in a State that the installing function lacks
@fx.uses(log_density, observations)
def counted_model(theta: jax.Array) -> None:
    with fx.intercept(log_density, add=lambda outer, a: (evals.modify(lambda n: n + 1), outer.add(a))[1]):
        model(theta)  # E: effax-undeclared


with observations.provide(DATA), log_density.open(), evals.init(jnp.int32(0)):
    counted_model(jnp.zeros(2))


# case: the counting interceptor with the counter in the row
@fx.uses(log_density, observations, evals)
def counted_model_ok(theta: jax.Array) -> None:
    with fx.intercept(log_density, add=lambda outer, a: (evals.modify(lambda n: n + 1), outer.add(a))[1]):
        model(theta)


with observations.provide(DATA), log_density.open(), evals.init(jnp.int32(0)) as n_evals:
    counted_model_ok(jnp.zeros(2))
print("terms added", int(n_evals.value))


# case: an acceptance-rate tracker started from the int 0 and averaged in a compiled scan
@fx.uses(acceptance)
def track(accepted: jax.Array) -> None:
    acceptance.modify(lambda a: 0.95 * a + 0.05 * accepted)  # type: ignore[arg-type,return-value]  # pyright: ignore[reportArgumentType]


with acceptance.init(0):  # E: effax-handler-type
    fx.scan(lambda c, a: (c, track(a)), None, jnp.array([1.0, 0.0, 1.0]))


# case: the tracker started from 0.0 works compiled
with acceptance.init(0.0) as rate:
    fx.scan(lambda c, a: (c, track(a)), None, jnp.array([1.0, 0.0, 1.0]))
print("acceptance", rate.value)


# case: handlers spread from a tuple; fx.handle owns the cells
chain_cells = (position.init(jnp.zeros(2)), mh_keys.seed(4))
chain_fn = fx.handle(run_chain, *chain_cells)
with observations.provide(DATA):
    draws = chain_fn(10)


# case: fx.handle given only the position cell, called with the data provided
only_position = (position.init(jnp.zeros(2)),)
with observations.provide(DATA):
    fx.handle(run_chain, *only_position)(10)  # E: effax-unhandled


# case: a State interceptor answering get itself but forwarding set to nothing
frozen_start = fx.intercept(position, get=lambda outer: jnp.zeros(2))
with frozen_start:
    position.set(jnp.ones(2))  # limit: an interceptor answering one operation forwards another


# case: the pure log_joint differentiated at module level with the data provided
with observations.provide(DATA):
    grad_lp = jax.grad(log_joint)(jnp.array([1.0, 0.0]))
print("gradient of the log joint", grad_lp)

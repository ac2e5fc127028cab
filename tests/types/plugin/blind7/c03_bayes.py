"""Bayesian regression: priors and likelihoods as a log-joint effect, MCMC and VI loops."""

from __future__ import annotations

from typing import Any

import attrs
import jax
import jax.numpy as jnp
from jax.scipy import stats

import effax as fx


class LogJoint(fx.Effect["LogProb"]):
    """Accumulates log-density terms; a model adds its priors and likelihoods."""

    operations = ("add",)

    def add(self, lp: jax.Array) -> None:
        self.handler().add(lp)

    def accumulate(self) -> LogProb:
        return LogProb(self)

    def tempered(self, beta: float):  # a maker without a return annotation  # E: no-untyped-def
        return TemperedLogProb(self, beta=beta)


@attrs.define(eq=False)
class LogProb(fx.Handler[LogJoint]):
    effect: LogJoint
    total: jax.Array = attrs.field(factory=lambda: jnp.float32(0))
    fields = fx.Fields(carry="total")

    def add(self, lp: jax.Array) -> None:
        self.effect.check_store(self, lp)
        self.total = self.total + lp

    @property
    def value(self) -> jax.Array:
        return self.total

    @classmethod
    def rebuild(cls, effect: LogJoint, static: Any, const: Any, carry: Any) -> LogProb:
        return cls(effect, carry)


@attrs.define(eq=False)
class TemperedLogProb(LogProb):
    beta: float = 1.0
    fields = fx.Fields(static="beta", carry="total")

    def add(self, lp: jax.Array) -> None:
        self.total = self.total + self.beta * lp

    @classmethod
    def rebuild(cls, effect: LogJoint, static: Any, const: Any, carry: Any) -> TemperedLogProb:
        return cls(effect, carry, static)


log_joint = LogJoint("log_joint")
prior_scale = fx.Ask[jax.Array]("prior_scale", default=jnp.float32(1.0))
noise_scale = fx.Ask[jax.Array]("noise_scale")
observations = fx.Ask[tuple[jax.Array, jax.Array]]("observations")
mcmc_key = fx.RandomKey("mcmc_key")
accept_rate = fx.State[float]("accept_rate")
adapt = fx.StateDict[jax.Array]("adapt")
trace = fx.Emit[jax.Array]("trace")


@fx.uses(log_joint, prior_scale)
def prior(theta: jax.Array) -> None:
    log_joint.add(jnp.sum(stats.norm.logpdf(theta, 0.0, prior_scale.ask())))


@fx.uses(log_joint, noise_scale, observations)
def likelihood(theta: jax.Array) -> None:
    x, y = observations.ask()
    log_joint.add(jnp.sum(stats.norm.logpdf(y, x @ theta, noise_scale.ask())))


MODEL_ROW = (log_joint, prior_scale, noise_scale, observations)


@fx.uses(*MODEL_ROW)
def model(theta: jax.Array) -> None:
    prior(theta)
    likelihood(theta)


@fx.uses(prior_scale, noise_scale, observations)
def log_density(theta: jax.Array) -> jax.Array:
    with log_joint.accumulate() as acc:
        model(theta)
    return acc.value


@fx.uses(prior_scale, observations)
def log_density_leaky(theta: jax.Array) -> jax.Array:
    with log_joint.accumulate() as acc:
        model(theta)  # E: effax-undeclared
    return acc.value


@fx.uses(prior_scale, noise_scale, observations, mcmc_key, accept_rate, trace)
def mh_step(theta: jax.Array, _: None) -> tuple[jax.Array, None]:
    proposal = theta + 0.2 * jax.random.normal(mcmc_key.next_key(), theta.shape)
    log_ratio = log_density(proposal) - log_density(theta)
    accept = jnp.log(jax.random.uniform(mcmc_key.next_key())) < log_ratio
    accept_rate.modify(lambda r: 0.95 * r + 0.05 * accept.astype(jnp.float32))  # pyright: ignore[reportArgumentType]  # E: arg-type, return-value
    theta = jnp.where(accept, proposal, theta)
    trace.emit(theta)
    return theta, None


@fx.uses(prior_scale, noise_scale, observations, mcmc_key, accept_rate, trace)
def run_chain(theta0: jax.Array, n: int = 20) -> jax.Array:
    final, _ = fx.scan(mh_step, theta0, None, length=n)
    return final


@fx.uses(prior_scale, noise_scale, observations, mcmc_key, accept_rate)
def run_chain_untraced(theta0: jax.Array) -> jax.Array:
    final, _ = fx.scan(mh_step, theta0, None, length=5)  # E: effax-undeclared
    return final


key = jax.random.key(0)
x_obs = jax.random.normal(key, (12, 2))
y_obs = x_obs @ jnp.array([1.5, -0.5]) + 0.1 * jax.random.normal(jax.random.key(1), (12,))
theta0 = jnp.zeros(2)
data_h = observations.provide((x_obs, y_obs))

# case: the log density under its data and noise
with data_h, noise_scale.provide(jnp.float32(0.1)):
    lp = log_density(theta0)
    lp_jit = fx.jit(log_density)(theta0)

# case: the model run with no accumulator at module level
with data_h, noise_scale.provide(jnp.float32(0.1)):
    model(theta0)  # E: effax-unhandled

# case: the log density with no noise scale provided
with data_h:
    log_density(theta0)  # E: effax-unhandled

# case: a row that drops the noise scale its model needs (provided outside)
with data_h, noise_scale.provide(jnp.float32(0.1)):
    log_density_leaky(theta0)

# case: a chain of Metropolis steps, compiled, with a float acceptance rate
with fx.handlers(data_h, noise_scale.provide(jnp.float32(0.1)), mcmc_key.seed(0),
                 accept_rate.init(0.0), trace.collect()) as hs:
    theta = fx.jit(run_chain, static_argnums=1)(theta0, 20)

# case: the acceptance rate started from an int, then compiled
with fx.handlers(data_h, noise_scale.provide(jnp.float32(0.1)), mcmc_key.seed(0),
                 accept_rate.init(0), trace.collect()):  # E: effax-handler-type
    fx.jit(run_chain, static_argnums=1)(theta0, 5)

# case: a chain whose row forgets the trace it emits (a collector outside)
with fx.handlers(data_h, noise_scale.provide(jnp.float32(0.1)), mcmc_key.seed(0),
                 accept_rate.init(0.0), trace.collect()):
    run_chain_untraced(theta0)

# case: a chain with no key stream
with fx.handlers(data_h, noise_scale.provide(jnp.float32(0.1)), accept_rate.init(0.0), trace.discard()):
    run_chain(theta0, 3)  # E: effax-unhandled

# case: the prior alone, with an accumulator and the default prior scale
with log_joint.accumulate() as acc:
    prior(theta0)

# case: a tempered accumulator whose maker has no return annotation
with log_joint.tempered(0.5) as tempered:
    prior(theta0)


@fx.uses(prior_scale, noise_scale, observations, fx.rng, adapt)
def elbo(mu: jax.Array, log_sigma: jax.Array) -> jax.Array:
    eps = fx.random.normal((4, 2))
    thetas = mu + jnp.exp(log_sigma) * eps
    n = adapt.get("n", init=jnp.float32(0.0))
    adapt.set("n", n + 1.0)
    lps = jnp.stack([log_density(t) for t in thetas])
    return jnp.mean(lps) + jnp.sum(log_sigma)


@fx.uses(prior_scale, noise_scale, observations, fx.rng, adapt)
def vi_step(mu: jax.Array, log_sigma: jax.Array) -> tuple[jax.Array, jax.Array]:
    g_mu, g_ls = fx.grad(elbo, argnums=(0, 1))(mu, log_sigma)
    return mu + 0.01 * g_mu, log_sigma + 0.01 * g_ls


# case: variational steps, eager then compiled, with the adaptation dict
with fx.handlers(data_h, noise_scale.provide(jnp.float32(0.1)), fx.rng.seed(1), adapt.init()) as hs:
    mu, ls = theta0, jnp.full(2, -1.0)
    mu, ls = vi_step(mu, ls)
    mu, ls = fx.jit(vi_step)(mu, ls)

# case: a variational step with no adaptation dict
with data_h, noise_scale.provide(jnp.float32(0.1)), fx.rng.seed(1):
    vi_step(theta0, jnp.zeros(2))  # E: effax-unhandled

# case: the ELBO's gradient taken at module level with nothing handled
fx.grad(elbo)(theta0, jnp.zeros(2))  # E: effax-unhandled

# case: a prior scale that forwards to nothing: the default does not answer
widen = fx.intercept(prior_scale, ask=lambda outer: 10.0 * outer.ask())
with log_joint.accumulate(), widen:
    prior(theta0)  # E: effax-unhandled

# case: a prior scale widened over a provider
with log_joint.accumulate(), prior_scale.provide(jnp.float32(1.0)), widen:
    prior(theta0)

# case: a replaced prior scale that answers alone
with log_joint.accumulate(), fx.intercept(prior_scale, ask=lambda outer: jnp.float32(3.0)):
    prior(theta0)

# case: the likelihood read straight from the effect at module level
log_joint.add(jnp.float32(0.0))  # E: effax-unhandled


@fx.uses(log_joint)
def prior_only(theta: jax.Array) -> None:
    prior(theta)  # E: effax-undeclared


# case: a prior whose caller's row omits the prior scale (provided outside)
with log_joint.accumulate(), prior_scale.provide(jnp.float32(2.0)):
    prior_only(theta0)

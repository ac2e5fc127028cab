"""A Bayesian linear regression fitted by stochastic variational inference (mean-field Gaussian)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx
from b10lib.effects import losses, lr, step_count

posterior = fx.RandomKey("posterior")
prior_scale = fx.Ask[jax.Array]("prior_scale")
num_particles = fx.Ask[int]("num_particles", static=True, default=2)
var_params = fx.State[dict[str, jax.Array]]("var_params")
elbo_trace = fx.Emit[jax.Array]("elbo_trace")
kl_weight = fx.Ask[float]("kl_weight", default=1.0)

XS = jnp.linspace(-2.0, 2.0, 16).reshape(8, 2)
YS = XS @ jnp.array([1.5, -0.5]) + 0.1


def log_normal(x: jax.Array, mu: jax.Array, sigma: jax.Array) -> jax.Array:
    return jnp.sum(-0.5 * ((x - mu) / sigma) ** 2 - jnp.log(sigma) - 0.5 * jnp.log(2 * jnp.pi))


@fx.uses(posterior)
def sample_weights(q: dict[str, jax.Array]) -> jax.Array:
    return q["mu"] + jnp.exp(q["log_sigma"]) * fx.random.normal(q["mu"].shape, stream=posterior)


@fx.uses(posterior, prior_scale, kl_weight)
def elbo_particle(q: dict[str, jax.Array]) -> jax.Array:
    w = sample_weights(q)
    lik = log_normal(YS, XS @ w, jnp.float32(0.3))
    prior = log_normal(w, jnp.zeros_like(w), prior_scale.ask())
    entropy = -log_normal(w, q["mu"], jnp.exp(q["log_sigma"]))
    return lik + kl_weight.ask() * (prior + entropy)


@fx.uses(posterior, prior_scale, kl_weight, num_particles)
def elbo(q: dict[str, jax.Array]) -> jax.Array:
    return jnp.mean(jnp.stack([elbo_particle(q) for _ in range(num_particles.ask())]))


@fx.uses(posterior, prior_scale, kl_weight, num_particles, var_params, lr, elbo_trace, step_count)
def svi_step() -> jax.Array:
    q = var_params.get()
    value, g = fx.value_and_grad(lambda q_: -elbo(q_))(q)
    var_params.set(jax.tree.map(lambda a, b: a - lr.ask() * b, q, g))
    elbo_trace.emit(-value)
    step_count.modify(lambda n: n + 1)
    return value  # E: no-any-return


Q0 = {"mu": jnp.zeros(2), "log_sigma": jnp.full(2, -1.0)}


def svi_handlers(seed: int) -> fx.Handlers:
    return fx.handlers(
        posterior.seed(seed),
        prior_scale.provide(jnp.float32(1.0)),
        var_params.init(Q0),
        lr.provide(jnp.float32(0.01)),
        elbo_trace.collect(),
        step_count.init(jnp.int32(0)),
    )


# case: 5 compiled SVI steps
fast_svi = fx.jit(svi_step)
with fx.handlers(
    posterior.seed(0), prior_scale.provide(jnp.float32(1.0)), var_params.init(Q0),
    lr.provide(jnp.float32(0.01)), elbo_trace.collect(), step_count.init(jnp.int32(0)),
) as hs:
    for _ in range(5):
        fast_svi()
print(hs[step_count], len(hs[elbo_trace]))

# case: the ELBO with the prior scale missing
with posterior.seed(0):
    elbo(Q0)  # E: effax-unhandled

# case: the ELBO with every effect handled; defaults answer num_particles and kl_weight
with posterior.seed(0), prior_scale.provide(jnp.float32(2.0)):
    print(elbo(Q0))

# case: the SVI step scanned inside a bundle returned by a helper (a function of mine)
with svi_handlers(1):
    fx.scan(lambda c, _: (c, svi_step()), None, None, length=3)


# case: a posterior predictive with a row that omits the posterior stream
@fx.uses(var_params)
def predictive_mean(x: jax.Array) -> jax.Array:
    draws = jnp.stack([sample_weights(var_params.get()) for _ in range(4)])  # E: effax-undeclared
    return jnp.mean(x @ draws.T, axis=-1)


with var_params.init(Q0), posterior.seed(3):
    predictive_mean(XS)


# case: the posterior predictive with the stream in the row, vmapped over inputs
@fx.uses(var_params, posterior)
def predictive_one(x: jax.Array) -> jax.Array:
    return x @ sample_weights(var_params.get())


with var_params.init(Q0), posterior.seed(3) as ps:
    preds = fx.vmap(predictive_one)(XS)
print(preds.shape, ps.value.counter)

# case: the vmapped predictive called at module level with no posterior stream
with var_params.init(Q0):
    fx.vmap(predictive_one, keys="shared")(XS)  # E: effax-unhandled


# case: annealing the KL term through an interceptor that forwards to a provider
anneal = fx.intercept(kl_weight, ask=lambda outer: 0.5 * outer.ask())
with posterior.seed(0), prior_scale.provide(jnp.float32(1.0)), kl_weight.provide(1.0), anneal:
    print(elbo(Q0))

# case: the annealing interceptor with no provider outside it: the default does not answer
with posterior.seed(0), prior_scale.provide(jnp.float32(1.0)), anneal:
    elbo(Q0)  # E: effax-unhandled

# case: an interceptor that answers kl_weight by itself needs no provider
warmup = fx.intercept(kl_weight, ask=lambda outer: 0.1)
with posterior.seed(0), prior_scale.provide(jnp.float32(1.0)), warmup:
    print(elbo(Q0))


# case: a variational family refit whose row forgets num_particles, called under a provider
@fx.uses(posterior, prior_scale, kl_weight)
def refit_objective(q: dict[str, jax.Array]) -> jax.Array:
    return -elbo(q)  # E: effax-undeclared


with posterior.seed(0), prior_scale.provide(jnp.float32(1.0)), num_particles.provide(3):
    refit_objective(Q0)


# case: gradient of the ELBO via fx.grad kept in a variable, under its handlers
elbo_grad = fx.grad(elbo)
with posterior.seed(0), prior_scale.provide(jnp.float32(1.0)):
    print(elbo_grad(Q0)["mu"])

# case: the same gradient function at module level with nothing installed
elbo_grad_2 = fx.grad(elbo)
elbo_grad_2(Q0)  # E: effax-unhandled

# case: JAX's own grad around a function with a row, under its handlers
with posterior.seed(1), prior_scale.provide(jnp.float32(1.0)):
    print(jax.grad(elbo)(Q0)["log_sigma"])

# case: JAX's own value_and_grad kept in a variable, called without the prior scale
vg = jax.value_and_grad(elbo)
with posterior.seed(1):
    vg(Q0)  # E: effax-unhandled

# case: the SVI step with the elbo trace discarded and kl_weight overridden
with fx.handlers(
    posterior.seed(2), prior_scale.provide(jnp.float32(1.0)), var_params.init(Q0),
    lr.provide(jnp.float32(0.01)), elbo_trace.discard(), step_count.init(jnp.int32(0)),
    kl_weight.provide(0.5),
):
    svi_step()

# case: the SVI step with the step counter missing
with fx.handlers(
    posterior.seed(2), prior_scale.provide(jnp.float32(1.0)), var_params.init(Q0),
    lr.provide(jnp.float32(0.01)), elbo_trace.discard(),
):
    svi_step()  # E: effax-unhandled

# case: one particle, provided as a hashable int to the static Ask, compiled
with posterior.seed(0), prior_scale.provide(jnp.float32(1.0)), num_particles.provide(1):
    print(fx.jit(elbo)(Q0))

# case: particles in parallel by fx.vmap with split keys, inside a row that holds the stream
@fx.uses(posterior, prior_scale, kl_weight)
def parallel_elbo(q: dict[str, jax.Array], n: int) -> jax.Array:
    return jnp.mean(fx.vmap(lambda _: elbo_particle(q), keys="split")(jnp.arange(n)))


with posterior.seed(4), prior_scale.provide(jnp.float32(1.0)):
    print(parallel_elbo(Q0, 3))


# case: parallel particles from a row without the prior scale
@fx.uses(posterior, kl_weight)
def parallel_elbo_bad(q: dict[str, jax.Array]) -> jax.Array:
    return jnp.mean(fx.vmap(lambda _: elbo_particle(q))(jnp.arange(2)))  # E: effax-undeclared


with posterior.seed(4), prior_scale.provide(jnp.float32(1.0)):
    parallel_elbo_bad(Q0)

# case: a sample from a Dirichlet and a Beta for a mixture prior, named stream
with posterior.seed(5):
    mix = fx.random.dirichlet(jnp.ones(3), stream=posterior)
    frac = fx.random.beta(2.0, 2.0, stream=posterior)
print(mix.sum(), frac)

# case: a truncated normal from the default stream, with the posterior stream only
with posterior.seed(5):
    fx.random.truncated_normal(-1.0, 1.0, (2,))  # E: effax-unhandled

# case: a multivariate normal draw with the default stream seeded
with fx.rng.seed(1):
    print(fx.random.multivariate_normal(jnp.zeros(2), jnp.eye(2)))

# case: a compiled ELBO owning its stream and prior scale
owned_elbo = fx.handle(elbo, posterior.seed(0), prior_scale.provide(jnp.float32(1.0)), transform=jax.jit)
print(owned_elbo(Q0), owned_elbo(Q0))

# case: an ELBO owning only its stream, called bare
stream_only = fx.handle(elbo, posterior.seed(0))
stream_only(Q0)  # E: effax-unhandled

# case: the handled ELBO under the missing prior scale
with prior_scale.provide(jnp.float32(0.5)):
    print(stream_only(Q0))

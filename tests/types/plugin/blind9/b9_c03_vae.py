"""A tiny variational autoencoder: key streams, reparameterisation, ELBO gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx
from b9lib.effects import dropout, init_key, losses, noise, training
from b9lib.layers import Linear, drop, glorot

latent = fx.RandomKey("latent")
beta = fx.Ask[jax.Array]("beta")
kl_terms = fx.Emit[jax.Array]("kl_terms")

data = jnp.linspace(-1.0, 1.0, 24).reshape(6, 4)

# case: parameters drawn from the init stream


@fx.uses(init_key)
def init_vae(n_in: int = 4, n_hidden: int = 8, n_latent: int = 2) -> dict[str, jax.Array]:
    return {
        "enc": glorot(n_in, n_hidden),
        "mu": glorot(n_hidden, n_latent),
        "logvar": glorot(n_hidden, n_latent),
        "dec": glorot(n_latent, n_in),
    }


with init_key.seed(0):
    vae_params = init_vae()

# case: initialising with no seed

init_vae()  # E: effax-unhandled

# case: encoder and reparameterised sample


@fx.uses()
def encode(p: dict[str, jax.Array], x: jax.Array) -> tuple[jax.Array, jax.Array]:
    h = jnp.tanh(x @ p["enc"])
    return h @ p["mu"], h @ p["logvar"]


@fx.uses(latent)
def reparam(mu: jax.Array, logvar: jax.Array) -> jax.Array:
    eps = jax.random.normal(latent.next_key(), mu.shape)
    return mu + jnp.exp(0.5 * logvar) * eps


@fx.uses(latent, beta, kl_terms)
def elbo(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    mu, logvar = encode(p, x)
    z = reparam(mu, logvar)
    recon = jnp.tanh(z @ p["dec"])
    kl = -0.5 * jnp.sum(1 + logvar - mu**2 - jnp.exp(logvar))
    kl_terms.emit(kl)
    return jnp.mean((recon - x) ** 2) + beta.ask() * kl / x.shape[0]


with fx.handlers(latent.seed(1), beta.provide(jnp.float32(0.5)), kl_terms.collect()) as vh:
    e0 = elbo(vae_params, data)
    e1, g1 = fx.value_and_grad(elbo)(vae_params, data)

# case: sampling step whose row forgets the latent stream


@fx.uses(beta, kl_terms)
def elbo_no_stream(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    mu, logvar = encode(p, x)
    z = reparam(mu, logvar)  # E: effax-undeclared
    kl_terms.emit(jnp.sum(mu**2))
    return jnp.mean(z) * beta.ask()


with fx.handlers(latent.seed(1), beta.provide(jnp.float32(0.5)), kl_terms.collect()):
    elbo_no_stream(vae_params, data)

# case: a compiled training step with grads and emits


@fx.uses(latent, beta, kl_terms, losses)
def vae_step(p: dict[str, jax.Array], x: jax.Array) -> dict[str, jax.Array]:
    value, g = fx.value_and_grad(elbo)(p, x)
    losses.emit(value)
    return jax.tree.map(lambda a, b: a - 0.05 * b, p, g)  # E: no-any-return


fast_vae_step = fx.jit(vae_step)
with fx.handlers(latent.seed(2), beta.provide(jnp.float32(1.0)), kl_terms.collect(), losses.collect()) as th:
    for _ in range(3):
        vae_params = fast_vae_step(vae_params, data)

# case: compiled step without its collector

with fx.handlers(latent.seed(2), beta.provide(jnp.float32(1.0)), kl_terms.collect()):
    fast_vae_step(vae_params, data)  # E: effax-unhandled

# case: keyless samplers from the default stream


@fx.uses(fx.rng)
def prior_samples(n: int) -> jax.Array:
    return fx.random.normal((n, 2))


with fx.rng.seed(0):
    prior = prior_samples(5)
    u = fx.random.uniform((3,), minval=-1.0, maxval=1.0)
    coin = fx.random.bernoulli(0.5, (4,), stream=dropout)  # E: effax-unhandled

# case: keyless sampler at module level

unseeded = fx.random.normal((2,))  # E: effax-unhandled

# case: sampler on a named stream inside a function without it


@fx.uses(fx.rng)
def jitter(v: jax.Array) -> jax.Array:
    return v + 0.01 * fx.random.normal(v.shape, stream=noise)  # E: effax-undeclared


with fx.rng.seed(0), noise.seed(1):
    jitter(data)

# case: per-example noise with vmap


@fx.uses(latent)
def perturb(x: jax.Array) -> jax.Array:
    return x + 0.1 * jax.random.normal(latent.next_key(), x.shape)


with latent.seed(3) as ls:
    split_rows = fx.vmap(perturb)(data)
    shared_rows = fx.vmap(perturb, keys="shared")(data)

# case: vmapped perturbation with no seed

batched_perturb = fx.vmap(perturb)
batched_perturb(data)  # E: effax-unhandled

# case: constructor drawing weights

with init_key.seed(4):
    enc_layer = Linear(4, 3)

# case: constructor without seed

dec_layer = Linear(3, 4)  # E: effax-unhandled

# case: dropout only in training, called for evaluation with a stream


@fx.uses(training, dropout)
def decode_with_dropout(z: jax.Array, w: jax.Array) -> jax.Array:
    return drop(jnp.tanh(z @ w), 0.1)


w_dec = jnp.ones((2, 4)) * 0.5
with dropout.seed(0):
    evaluated = decode_with_dropout(jnp.ones((3, 2)), w_dec)
with training.provide(True), dropout.seed(0):
    trained = decode_with_dropout(jnp.ones((3, 2)), w_dec)

# case: evaluation call with no key stream

evaluated_again = decode_with_dropout(jnp.ones((3, 2)), w_dec)  # E: effax-unhandled

# case: training call with no key stream

with training.provide(True):
    decode_with_dropout(jnp.ones((3, 2)), w_dec)  # E: effax-unhandled

# case: JAX grad of a rowed loss at module level


@fx.uses(beta)
def penalty(w: jax.Array) -> jax.Array:
    return beta.ask() * jnp.sum(w**2)


with beta.provide(jnp.float32(0.1)):
    gp = jax.grad(penalty)(jnp.ones(3))
penalty_grad = jax.grad(penalty)
penalty_grad(jnp.ones(3))  # E: effax-unhandled

# case: value_and_grad from JAX, under handlers

with beta.provide(jnp.float32(0.2)):
    vg = jax.value_and_grad(penalty)(jnp.arange(3.0))

# case: jax.vmap over a rowed function without a handler

jax.vmap(penalty)(jnp.ones((2, 3)))  # E: effax-unhandled

# case: walrus-bound handler around the sampler

with (seeded := latent.seed(7)):
    zs = reparam(jnp.zeros(2), jnp.zeros(2))
counter_after = seeded.value.counter

# case: the seeded variable rebound to another stream

sampler_handler = latent.seed(8)
sampler_handler = noise.seed(8)
with sampler_handler:
    reparam(jnp.zeros(2), jnp.zeros(2))  # E: effax-unhandled

"""Metropolis-Hastings: the kernel of NumPyro's `MCMCKernel` docstring, ported to effax.

NumPyro's example kernel carries its random key in its state (`MHState(u, rng_key)`)
and splits it by hand on every step. Here the chain's position is an `effax.State`
and the keys come from an `effax.RandomKey` stream: the kernel draws where it needs
a key and returns nothing but the new position. `effax.scan` runs the steps under
`effax.jit`, and `effax.vmap(..., keys="split", state="batched")` runs several
chains, each drawing from its own stream and owning its row of the state.

The target is the docstring's: potential ``sum((x - 2)**2)``, i.e. a Normal with
mean 2 and variance 1/2 in each coordinate; the samples' moments are checked against
it. NumPyro's `MCMC` runs the original kernel on the same problem, both are timed
after compilation, and a table compares lines of code and speed.

Run: python examples/metropolis.py [--quick]
"""

from __future__ import annotations

import argparse
import functools as ft
from collections import namedtuple
from typing import Any

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import numpyro
import numpyro.distributions as dist
from _porting import lines_of_code, print_table, timed
from jax import lax
from numpyro.infer import MCMC

import effax as fx

TARGET_MEAN, TARGET_VAR = 2.0, 0.5
INIT = jnp.array([1.0, 2.0])  # the docstring's init_params


def potential(x: jax.Array) -> jax.Array:
    """The docstring's potential energy: -log density of N(2, 1/2) per coordinate."""
    return ((x - 2) ** 2).sum()


# --- port: kernel --------------------------------------------------------------------

position = fx.State[jax.Array]("position")  # MHState.u
mh_keys = fx.RandomKey("mh_keys")  # replaces MHState.rng_key


def mh_step(step_size: float = 0.1) -> jax.Array:
    """One Metropolis-Hastings transition of the position; returns the new position."""
    u = position.get()
    u_proposal = dist.Normal(u, step_size).sample(mh_keys.next_key())
    accept_prob = jnp.exp(potential(u) - potential(u_proposal))
    u_new = jnp.where(dist.Uniform().sample(mh_keys.next_key()) < accept_prob, u_proposal, u)
    position.set(u_new)
    return u_new


# --- port: sampling --------------------------------------------------------------------


def chain(num_warmup: int, num_samples: int) -> jax.Array:
    """Warm up, then return `num_samples` positions."""
    step = lambda _, __: (None, mh_step())
    fx.scan(step, None, length=num_warmup)
    return fx.scan(step, None, length=num_samples)[1]


@fx.jit(static_argnums=(0, 1))
def sample_chains(num_warmup: int, num_samples: int) -> jax.Array:
    """One chain per row of the position state: samples of shape (chains, samples, dim)."""
    run = ft.partial(chain, num_warmup, num_samples)
    return fx.vmap(run, keys="split", state="batched")()


def port(num_chains: int, num_warmup: int, num_samples: int, seed: int) -> Any:
    """Run the chains from the docstring's init; returns the samples and the seconds."""
    with fx.handlers(position.init(jnp.tile(INIT, (num_chains, 1))), mh_keys.seed(seed)):
        return timed(sample_chains, num_warmup, num_samples)


# --- original: kernel ----------------------------------------------------------------
# verbatim from the docstring of numpyro.infer.mcmc.MCMCKernel

MHState = namedtuple("MHState", ["u", "rng_key"])


class MetropolisHastings(numpyro.infer.mcmc.MCMCKernel):
    sample_field = "u"

    def __init__(self, potential_fn, step_size=0.1):
        self.potential_fn = potential_fn
        self.step_size = step_size

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        return MHState(init_params, rng_key)

    def sample(self, state, model_args, model_kwargs):
        u, rng_key = state
        rng_key, key_proposal, key_accept = jr.split(rng_key, 3)
        u_proposal = dist.Normal(u, self.step_size).sample(key_proposal)
        accept_prob = jnp.exp(self.potential_fn(u) - self.potential_fn(u_proposal))
        u_new = jnp.where(dist.Uniform().sample(key_accept) < accept_prob, u_proposal, u)
        return MHState(u_new, rng_key)


# --- original: sampling ----------------------------------------------------------------


def original(num_chains: int, num_warmup: int, num_samples: int, seed: int) -> Any:
    kernel = MetropolisHastings(potential)
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method=jax.vmap,  # the docstring runs one chain; this vectorises several
        progress_bar=False,
    )
    mcmc.run(jr.key(seed), init_params=jnp.tile(INIT, (num_chains, 1)))
    return mcmc.get_samples(group_by_chain=True)


# --- comparing them --------------------------------------------------------------------


@ft.partial(jax.jit, static_argnums=(1, 2))
def original_compiled(state: MHState, num_warmup: int, num_samples: int) -> jax.Array:
    """The loop `mcmc.run` compiles, compiled once (`mcmc.run` recompiles on every call)."""
    kernel = MetropolisHastings(potential)

    def chain(state: MHState) -> jax.Array:
        def step(state: MHState, _: None) -> tuple[MHState, jax.Array]:
            state = kernel.sample(state, (), {})
            return state, state.u

        state, _ = lax.scan(step, state, length=num_warmup)
        return lax.scan(step, state, length=num_samples)[1]

    return jax.vmap(chain)(state)


def moments(samples: jax.Array) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance per coordinate over every chain and sample."""
    flat = np.asarray(samples).reshape(-1, samples.shape[-1])
    return flat.mean(axis=0), flat.var(axis=0)


def check_transparency(num_chains: int = 4, steps: int = 3) -> tuple[bool, bool]:
    """Compiled chains against the same chains run eagerly, a Python loop under
    `effax.vmap`: (close, bit for bit), comparing samples, positions and keys drawn."""

    def eager() -> jax.Array:
        return jnp.stack([mh_step() for _ in range(steps)])

    runs = []
    for fn in (lambda: sample_chains(0, steps), fx.vmap(eager, keys="split", state="batched")):
        with fx.handlers(position.init(jnp.tile(INIT, (num_chains, 1))), mh_keys.seed(7)) as hs:
            runs.append([fn(), hs[position], jnp.asarray(hs[mh_keys].counter)])
    close = all(jnp.allclose(a, b, rtol=1e-6) for a, b in zip(*runs, strict=True))
    exact = all(jnp.array_equal(a, b) for a, b in zip(*runs, strict=True))
    return close, exact


def main(
    num_samples: int = 1000,
    *,
    num_warmup: int = 1000,
    num_chains: int = 256,
    repeats: int = 5,
    seed: int = 0,
) -> dict[str, Any]:
    sizes = (num_warmup, num_samples)
    # first runs: trace, compile, run; mcmc.run does all three on every call
    port_samples, port_first = port(num_chains, *sizes, seed)
    original_samples, original_first = timed(original, num_chains, *sizes, seed)
    # after compilation: the best of `repeats` runs of each compiled program
    port_seconds = min(port(num_chains, *sizes, seed)[1] for _ in range(repeats))

    def start() -> MHState:  # the chains' start as mcmc.run makes it (fresh keys each time)
        return MHState(jnp.tile(INIT, (num_chains, 1)), jr.split(jr.key(seed), num_chains))

    compiled_samples, _ = timed(original_compiled, start(), *sizes)
    original_seconds = min(timed(original_compiled, start(), *sizes)[1] for _ in range(repeats))
    steps = num_chains * (num_warmup + num_samples)

    results = {"port": moments(port_samples), "original": moments(original_samples)}
    print(f"{num_chains} chains x ({num_warmup} warmup + {num_samples} samples)")
    print(f"target            mean {TARGET_MEAN}  variance {TARGET_VAR}")
    for name, (mean, var) in results.items():
        print(f"{name + ' samples':17} mean {np.round(mean, 3)}  variance {np.round(var, 3)}")
    lines = lines_of_code(__file__)
    rate = "chain steps / second (compiled)"
    print_table(lines, steps / port_seconds, steps / original_seconds, rate=rate)
    print(f"{'first run, seconds (with compile)':34}{port_first:11.2f}{original_first:9.2f}")
    close, exact = check_transparency()
    print(f"\ncompiled chains and eager chains agree: {close} (bit for bit: {exact})")
    return {
        "port": results["port"],
        "original": results["original"],
        "original_reproduced": bool(jnp.allclose(compiled_samples, original_samples)),
        "lines": lines,
        "port_steps_per_second": steps / port_seconds,
        "original_steps_per_second": steps / original_seconds,
        "port_first_run_seconds": port_first,
        "original_first_run_seconds": original_first,
        "transparent": close,
        "bit_for_bit": exact,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short chains (300 + 500 steps)")
    quick = parser.parse_args().quick
    main(500, num_warmup=300) if quick else main()

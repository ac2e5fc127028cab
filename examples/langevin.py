"""A Metropolis-adjusted Langevin (MALA) sampler drawing its keys inside `effax.scan`.

The sampler's transition draws two keys per step from an `effax.RandomKey` stream
(the Langevin proposal and the accept/reject coin), reads its step size from an
`effax.Ask`, and emits its acceptance rate through `effax.Emit`. `effax.scan` runs
the chain: the stream's counter advances exactly as it would in a Python loop
(step i, draw j uses counter ``c + 2·i + j``), so the compiled chain and a Python
loop over the same transition draw bit-identical keys; `check_transparency` shows it.

The target is a Gaussian with known mean and variance; the samples' mean and
variance are checked against them.

Run: python examples/langevin.py [--quick]
"""

from __future__ import annotations

import argparse
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import effax as fx

TARGET_MEAN = jnp.array([1.0, -2.0])
TARGET_STD = jnp.array([0.5, 1.5])

mcmc = fx.RandomKey("mcmc")
step_size = fx.Ask[jax.Array]("step_size")
accept_rate = fx.Emit[jax.Array]("accept_rate")


def log_density(x: jax.Array) -> jax.Array:
    """The target's log density (up to a constant) at one point `x` of shape (dim,)."""
    return -0.5 * jnp.sum(((x - TARGET_MEAN) / TARGET_STD) ** 2)


def log_proposal(to: jax.Array, frm: jax.Array, eps: jax.Array) -> jax.Array:
    """log q(to | frm) of the Langevin proposal, up to a constant."""
    mean = frm + 0.5 * eps**2 * jax.grad(log_density)(frm)
    return -0.5 * jnp.sum((to - mean) ** 2) / eps**2


# the same, for a batch of chains: (chains, dim) -> (chains,)
batch_log_density = jax.vmap(log_density)
batch_grad_log_density = jax.vmap(jax.grad(log_density))
batch_log_proposal = jax.vmap(log_proposal, in_axes=(0, 0, None))


def mala_step(x: jax.Array, _: Any = None) -> tuple[jax.Array, jax.Array]:
    """One MALA transition for a batch of chains `x` of shape (chains, dim)."""
    eps = step_size.ask()
    # draw keys where they are needed: inside the compiled loop each draw is a
    # fused fold_in of the stream's counter (no threefry call of its own)
    noise = fx.random.normal(x.shape, stream=mcmc)
    proposal = x + 0.5 * eps**2 * batch_grad_log_density(x) + eps * noise
    log_ratio = (
        batch_log_density(proposal)
        + batch_log_proposal(x, proposal, eps)
        - batch_log_density(x)
        - batch_log_proposal(proposal, x, eps)
    )
    u = fx.random.uniform(x.shape[:1], stream=mcmc)
    accept = jnp.log(u) < log_ratio
    accept_rate.emit(jnp.mean(accept))
    x = jnp.where(accept[:, None], proposal, x)
    return x, x


@fx.jit(static_argnums=1)
def sample(x0: jax.Array, n_steps: int) -> tuple[jax.Array, jax.Array]:
    """Run `n_steps` transitions; returns the final state and every state."""
    return fx.scan(mala_step, x0, None, length=n_steps)


def check_transparency(n_steps: int = 3) -> bool:
    """The compiled scan and a Python loop draw the same keys: same samples, bit for bit."""
    x0 = jnp.zeros((4, 2))

    def handlers() -> fx.Handlers:
        return fx.handlers(mcmc.seed(7), step_size.provide(jnp.float32(0.8)), accept_rate.collect())

    with handlers() as hs:
        _, compiled = sample(x0, n_steps)
        compiled_counter = hs[mcmc].counter
    with handlers() as hs:
        x, states = x0, []
        for _ in range(n_steps):
            x, _ = mala_step(x)
            states.append(x)
        eager_counter = hs[mcmc].counter
    # A compiled program may fuse float arithmetic differently from op-by-op
    # dispatch, so compare to a few ulps; the keys (and so every accept/reject
    # decision) are the same.
    close = np.allclose(compiled, jnp.stack(states), rtol=1e-5, atol=1e-5)
    return bool(close) and bool(compiled_counter == eager_counter == 2 * n_steps)


def main(
    steps: int = 2000, *, chains: int = 256, burn_in: int = 200, seed: int = 0
) -> dict[str, Any]:
    x0 = jnp.zeros((chains, 2))
    with fx.handlers(
        mcmc.seed(seed), step_size.provide(jnp.float32(0.8)), accept_rate.collect()
    ) as hs:
        _, states = sample(x0, steps)
    rates = hs[accept_rate][0]  # one row per step: stacked by effax.scan
    kept = states[burn_in:].reshape(-1, 2)
    mean, var = jnp.mean(kept, axis=0), jnp.var(kept, axis=0)
    print(f"{chains} chains x {steps} steps, keys drawn: {hs[mcmc].counter}")
    print(f"acceptance rate {float(jnp.mean(rates)):.3f}")
    print(f"sample mean     {np.array2string(np.asarray(mean), precision=3)}")
    print(f"target mean     {np.array2string(np.asarray(TARGET_MEAN), precision=3)}")
    print(f"sample variance {np.array2string(np.asarray(var), precision=3)}")
    print(f"target variance {np.array2string(np.asarray(TARGET_STD**2), precision=3)}")
    same = check_transparency()
    print(f"compiled scan and Python loop agree: {same}")
    return {
        "mean": mean,
        "var": var,
        "accept_rates": rates,
        "keys_drawn": hs[mcmc].counter,
        "transparent": same,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a short chain (500 steps)")
    main(500 if parser.parse_args().quick else 2000)

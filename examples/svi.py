"""Stochastic variational inference: NumPyro's `examples/minipyro.py`, ported to effax.

The original fits a Normal guide to the posterior of a conjugate Normal model with
`numpyro.infer.SVI` and a 100-particle `Trace_ELBO`. Here the inference machinery is
a few functions that perform effects:

- `param` reads (and on first use creates) a parameter in an `effax.State` store;
- `sample` draws its key from an `effax.RandomKey` stream, replays a value the trace
  already holds (the guide's draw, when the model runs) and adds its log density
  to an `effax.State`;
- the ELBO averages 100 particles with `effax.vmap(..., keys="split")`: each particle
  draws from its own stream, and nobody splits or passes a key by hand.

The fitted guide is checked against the exact posterior (closed form, the model is
conjugate); the original NumPyro program runs on the same data, both are timed per
step after compilation, and a table compares lines of code and speed. NumPyro's
library provides `sample`, `param`, `SVI` and `Trace_ELBO`, so the original program is
shorter; the port's inference section stands for the effect-handler machinery that
Pyro's own `pyro/contrib/minipyro.py` spells out in about 160 lines.

Run: python examples/svi.py [--quick]
"""

from __future__ import annotations

import argparse
import functools as ft
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import jax.random as jr
import numpyro
import numpyro.distributions as dist
import optax
from _porting import lines_of_code, print_table, timed
from numpyro import optim
from numpyro.infer import SVI, Trace_ELBO
from numpyro.util import fori_loop

import effax as fx

NUM_PARTICLES = 100
LEARNING_RATE = 0.02

# --- port: inference (sample, param, ELBO) ---------------------------------------

params = fx.State[dict[str, jax.Array]]("params")  # numpyro.param's store
trace = fx.State[dict[str, jax.Array]]("trace")  # the values of the sites run so far
log_prob = fx.State[jax.Array]("log_prob")  # their summed log density
latent = fx.RandomKey("latent")
optimizer = optax.adam(LEARNING_RATE)
opt_state = fx.State[optax.OptState]("opt_state")


def param(name: str, init: float) -> jax.Array:
    """`numpyro.param`: the parameter `name`, created from `init` on first use."""
    if name not in params.get():
        params.modify(lambda p: {**p, name: jnp.float32(init)})
    return params.get()[name]


def sample(name: str, d: dist.Distribution, obs: jax.Array | None = None) -> jax.Array:
    """`numpyro.sample`: `obs`, else the value the trace holds (replay), else a draw."""
    value = obs if obs is not None else trace.get().get(name)
    if value is None:
        value = d.rsample(latent.next_key())
        trace.modify(lambda t: {**t, name: value})
    log_prob.modify(lambda lp: lp + jnp.sum(d.log_prob(value)))
    return value


def run(fn: Callable[..., Any], *args: Any, replay: dict[str, jax.Array] | None = None) -> Any:
    """`trace(replay(fn, replay))`: the sites' values and log density of one run."""
    with fx.handlers(trace.init(replay or {}), log_prob.init(jnp.float32(0))) as hs:
        fn(*args)
    return hs[trace], hs[log_prob]


def elbo(data: jax.Array) -> jax.Array:
    """One particle's ELBO: log p(data, z) - log q(z), with z drawn from the guide."""
    guide_trace, log_q = run(guide, data)
    _, log_p = run(model, data, replay=guide_trace)
    return log_p - log_q


# the particles: a batch of ELBOs, each drawing from its own key stream
particles = fx.vmap(elbo, in_axes=None, axis_size=NUM_PARTICLES, keys="split")


def elbo_loss(p: dict[str, jax.Array], data: jax.Array) -> jax.Array:
    """`Trace_ELBO(num_particles=100)`'s loss at the parameters `p`."""
    with params.init(p):  # param() reads p here, so gradients with respect to p flow
        return -jnp.mean(particles(data))


def svi_step(data: jax.Array) -> jax.Array:
    """`svi.update`: one Adam step on the parameters and the optimiser state."""
    loss, grads = fx.value_and_grad(elbo_loss)(params.get(), data)
    updates, new_state = optimizer.update(grads, opt_state.get())
    params.set(optax.apply_updates(params.get(), updates))
    opt_state.set(new_state)
    return loss


# --- port: model and guide ---------------------------------------------------------
# as in the original, with the `sample` and `param` above


def model(data: jax.Array) -> None:
    loc = sample("loc", dist.Normal(0.0, 1.0))
    sample("obs", dist.Normal(loc, 1.0), obs=data)


def guide(data: jax.Array) -> None:
    guide_loc = param("guide_loc", 0.0)
    guide_scale = jnp.exp(param("guide_scale_log", 0.0))
    sample("loc", dist.Normal(guide_loc, guide_scale))


# --- port: training loop -----------------------------------------------------------


@fx.jit
def fit(data: jax.Array, steps: int | jax.Array) -> jax.Array:
    """`steps` SVI steps in one compiled loop; returns the last step's loss.

    `steps` is traced, so one program serves every length.
    """
    return fx.fori_loop(0, steps, lambda i, loss: svi_step(data), jnp.float32(0))


def port(data: jax.Array, steps: int, seed: int) -> tuple[dict[str, jax.Array], float]:
    """Fit the guide from scratch; returns its parameters and the loop's seconds."""
    with fx.handlers(params.init({}), latent.seed(seed)) as hs:
        run(guide, data)  # as svi.init does: a first run of the guide creates the params
        with opt_state.init(optimizer.init(params.get())):
            _, seconds = timed(fit, data, steps)
    return hs[params], seconds


# --- original: model and guide -----------------------------------------------------
# NumPyro's examples/minipyro.py


def numpyro_model(data: jax.Array) -> None:
    loc = numpyro.sample("loc", dist.Normal(0.0, 1.0))
    numpyro.sample("obs", dist.Normal(loc, 1.0), obs=data)


def numpyro_guide(data: jax.Array) -> None:
    guide_loc = numpyro.param("guide_loc", 0.0)
    guide_scale = jnp.exp(numpyro.param("guide_scale_log", 0.0))
    numpyro.sample("loc", dist.Normal(guide_loc, guide_scale))


# --- original: inference (sample, param, ELBO) -----------------------------------
# numpyro.sample, numpyro.param, SVI and Trace_ELBO are library code


adam = optim.Adam(LEARNING_RATE)
svi = SVI(numpyro_model, numpyro_guide, adam, Trace_ELBO(num_particles=NUM_PARTICLES))


# --- original: training loop -------------------------------------------------------


@ft.partial(jax.jit, static_argnums=2)  # jitted once (the original re-traces every run)
def numpyro_loop(svi_state: Any, data: jax.Array, steps: int) -> Any:
    return fori_loop(0, steps, lambda i, state: svi.update(state, data)[0], svi_state)


def original(data: jax.Array, steps: int, seed: int) -> tuple[dict[str, jax.Array], float]:
    svi_state = svi.init(jr.key(seed), data)
    svi_state, seconds = timed(numpyro_loop, svi_state, data, steps)
    return svi.get_params(svi_state), seconds


# --- comparing them ----------------------------------------------------------------


def exact_posterior(data: jax.Array) -> tuple[float, float]:
    """The posterior of `loc` under a N(0, 1) prior and N(loc, 1) likelihood: mean, std."""
    precision = 1.0 + data.shape[0]
    return float(jnp.sum(data) / precision), float(precision**-0.5)


def check_transparency(data: jax.Array, steps: int = 3, *, eager: bool = True) -> tuple[bool, bool]:
    """The compiled loop against a Python loop of `steps` SVI steps, each run eagerly
    (`eager`, a few seconds of op-by-op compilation) or as a compiled `fit(data, 1)`:
    (close, bit for bit), comparing the last loss, the parameters and the keys drawn."""
    one_step = svi_step if eager else lambda data: fit(data, 1)
    runs = []
    for loop in (lambda: fit(data, steps), lambda: [one_step(data) for _ in range(steps)][-1]):
        with fx.handlers(params.init({}), latent.seed(7)) as hs:
            run(guide, data)
            with opt_state.init(optimizer.init(params.get())):
                loss = loop()
        runs.append([loss, *jax.tree.leaves(hs[params]), jnp.asarray(hs[latent].counter)])
    close = all(jnp.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(*runs, strict=True))
    exact = all(jnp.array_equal(a, b) for a, b in zip(*runs, strict=True))
    return close, exact


def main(
    steps: int = 2000, *, repeats: int = 5, eager_check: bool = True, seed: int = 0
) -> dict[str, Any]:
    data = jr.normal(jr.key(0), shape=(100,)) + 3.0
    # the first run of each traces and compiles; the best of `repeats` more is timed
    port_runs = [port(data, steps, seed) for _ in range(1 + repeats)]
    original_runs = [original(data, steps, seed) for _ in range(1 + repeats)]
    port_rate = steps / min(seconds for _, seconds in port_runs[1:])
    original_rate = steps / min(seconds for _, seconds in original_runs[1:])

    mean, std = exact_posterior(data)
    fitted = {
        name: (float(p["guide_loc"]), float(jnp.exp(p["guide_scale_log"])))
        for name, p in (("port", port_runs[-1][0]), ("original", original_runs[-1][0]))
    }
    print(f"{steps} steps of {NUM_PARTICLES}-particle SVI")
    print(f"exact posterior   loc {mean:.4f}  scale {std:.4f}")
    for name, (loc, scale) in fitted.items():
        print(f"{name + ' guide':17} loc {loc:.4f}  scale {scale:.4f}")
    lines = lines_of_code(__file__)
    print_table(lines, port_rate, original_rate, rate="steps / second (compiled)")
    first = port_runs[0][1], original_runs[0][1]
    print(f"{'first run, seconds (with compile)':34}{first[0]:11.2f}{first[1]:9.2f}")
    close, exact = check_transparency(data, eager=eager_check)
    kind = "eager" if eager_check else "compiled single"
    print(
        f"\ncompiled loop and a Python loop of {kind} steps agree: {close} (bit for bit: {exact})"
    )
    return {
        "exact": (mean, std),
        "port": fitted["port"],
        "original": fitted["original"],
        "lines": lines,
        "port_steps_per_second": port_rate,
        "original_steps_per_second": original_rate,
        "port_first_run_seconds": first[0],
        "original_first_run_seconds": first[1],
        "transparent": close,
        "bit_for_bit": exact,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="the original's 1001 steps; no eager check"
    )
    quick = parser.parse_args().quick
    main(1001, eager_check=False) if quick else main()

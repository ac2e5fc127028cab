"""A probabilistic-programming language on effax interception: NumPyro's handlers
(`seed`, `trace`, `substitute`, `condition`, `scale`, `mask`, `block`, `replay`)
rebuilt as `effax.intercept` chains over one effect, `ppl`, with the operations
`sample`, `param` and `factor`.

Unlike NumPyro's messengers, the chain crosses `effax.jit`, `effax.scan`,
`effax.while_loop`, `effax.cond` and `effax.vmap`: a model sampling its latent
states inside a scan is traced and replayed correctly (the case of numpyro#1685),
a model may draw inside a while loop (numpyro#879), and the whole inference step
compiles once. `tests/test_ppl.py` checks it against NumPyro: log joint densities,
ELBOs and SVI.

Run: python examples/ppl.py [--quick]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import attrs
import jax
import jax.numpy as jnp
import numpyro.distributions as dist
import numpyro.primitives
import optax

import effax as fx

# --- the language: one effect, a base handler, and the handlers as interceptors ------


class PPL(fx.Effect["Sampler"]):
    """A probabilistic program's effect: `sample` a site, read a `param`, add a
    `factor` (a site's log density, per element) to the joint."""

    operations = ("sample", "param", "factor")

    def sample(self, name: str, fn: dist.Distribution, obs: Any = None) -> jax.Array:
        _refuse_numpyro_handlers("sample", name)
        value = self.handler().sample(name, fn, obs, _position())
        # the site's log density, through the handlers from the site's (scaled, masked,
        # hidden by block): performed here, since a handler's code runs where it is
        # installed and would reach only the handlers outside it
        self.factor(name, fn.log_prob(value))
        return value

    def param(self, name: str, init: jax.Array) -> jax.Array:
        _refuse_numpyro_handlers("param", name)
        return self.handler().param(name, init, _position())

    def factor(self, name: str, log_prob: jax.Array) -> None:
        _refuse_numpyro_handlers("factor", name)
        self.handler().factor(name, log_prob)


def _refuse_numpyro_handlers(operation: str, name: str) -> None:
    """A site goes through effax handlers only: a NumPyro messenger active around it
    (`numpyro.plate`, `numpyro.handlers.scale`, ...) would be ignored, so it is refused."""
    stack = getattr(numpyro.primitives, "_PYRO_STACK", ())
    if not stack:
        return
    messenger = stack[-1]
    kind = type(messenger).__name__
    if isinstance(messenger, numpyro.primitives.plate):
        which = f"numpyro.plate({messenger.name!r}, {messenger.size})"
        instead = (
            "give the distribution its batch shape instead (fn.expand((size,)), or batched"
            " parameters), wrap subsampled sites in ppl.scale(size / subsample_size), or map"
            ' the model with effax.vmap(..., keys="split")'
        )
    else:
        module = type(messenger).__module__
        which = f"{'numpyro' if module == 'numpyro.primitives' else module}.{kind}"
        instead = (
            f"use ppl.{kind} instead"
            if kind
            in {"seed", "trace", "substitute", "condition", "replay", "scale", "mask", "block"}
            else "use the examples/ppl.py handler that does the same, or effax.intercept on ppl"
        )
    raise fx.EffectUsageError(
        f"ppl.{operation}({name!r}) ran inside {which}, which examples/ppl.py does not"
        " honour: the port's sites go through effax handlers only, so NumPyro's handler"
        f" would be silently ignored; {instead}."
    )


rng = fx.RandomKey("ppl.rng")  # what `seed` seeds
log_joint = fx.State[jax.Array]("ppl.log_joint")  # what the factors add up to
sites = fx.Emit[dict[str, jax.Array]]("ppl.sites")  # what `trace` records
step = fx.Ask[jax.Array]("ppl.step")  # the step of `scan`, for stacked sites
scan_length = fx.Ask[int]("ppl.scan_length", static=True)  # and its number of steps
# Where a site is performed: its `scan` step and the number of steps, or None outside
# a scan. Read by the performer and passed with the site, as NumPyro's messages carry
# it: a handler's code runs where the handler is installed (outside the scan), so it
# sees the scan's `step` only through the site.
Position = tuple[jax.Array, int] | None


def _position() -> Position:
    try:
        return step.ask(), scan_length.ask()
    except fx.UnhandledEffectError:  # outside a scan
        return None


@attrs.define(eq=False)
class Sampler(fx.Handler[PPL]):
    """The base handler (under `seed`): draws latent sites from `rng` and adds up the
    factors (each site's log density among them, which `PPL.sample` adds)."""

    effect: PPL
    fields = fx.Fields()  # nothing of its own crosses a compiled boundary

    def sample(self, name: str, fn: dist.Distribution, obs: Any, at: Position) -> jax.Array:
        return fn.sample(rng.next_key()) if obs is None else obs

    def param(self, name: str, init: jax.Array, at: Position) -> jax.Array:
        return init

    def factor(self, name: str, log_prob: jax.Array) -> None:
        log_joint.modify(lambda total: total + jnp.sum(log_prob))

    @property
    def value(self) -> None:
        return None

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: Any, carry: Any) -> Sampler:
        return cls(effect)


# (after `Sampler`: pyright cannot evaluate a call of `PPL`, whose base class names
# `Sampler`, before `Sampler` is defined)
ppl = PPL("ppl")
sample, param, factor = ppl.sample, ppl.param, ppl.factor


def seed(key: int | jax.Array) -> fx.Handlers:
    """`numpyro.handlers.seed`, with the log joint collected: ``hs[log_joint]``."""
    return fx.handlers(rng.seed(key), log_joint.init(jnp.float32(0)), Sampler(ppl))


def _at(
    kind: str,
    name: str,
    value: Any,
    site_ndim: int,
    at: Position,
    draw: Callable[[], jax.Array] | None,
) -> Any:
    """`value` at the site's step `at` inside `scan`, by NumPyro's rule
    (`contrib.control_flow.scan`): a value of the site's own rank is the same at every
    step; one with a leading axis more is a series, whose row t is taken while t is
    below its length and `draw()` (a fresh sample) after it. Outside a scan: `value`."""
    if at is None:
        return value
    (t, length), value = at, jnp.asarray(value)
    where = f"ppl.{kind}'s value for site {name!r}"
    if value.ndim == site_ndim:
        return value
    if value.ndim != site_ndim + 1:
        raise fx.EffectUsageError(
            f"{where} has shape {value.shape}, but inside ppl.scan a site of rank {site_ndim}"
            f" takes a value of rank {site_ndim} (the same at every step) or a series of"
            f" rank {site_ndim + 1} (one row per step, at most {length} rows); give one of these."
        )
    n = value.shape[0]
    if n == length:
        return value[t]
    if n > length:
        raise fx.EffectUsageError(
            f"{where} has {n} steps, more than the ppl.scan of {length} steps around it"
            f" (NumPyro raises here too); give at most {length} rows."
        )
    if draw is None:
        raise fx.EffectUsageError(
            f"{where} has {n} steps, fewer than the ppl.scan of {length} steps around it,"
            " and a param site has nothing to draw after them; give one row per step."
        )
    fresh = draw()  # drawn at every step, so that each step draws the same number of keys
    if n == 0:
        return fresh
    return jnp.where(t < n, value[jnp.minimum(t, n - 1)], fresh)


def _recorded(outer: Any, name: str, fn: dist.Distribution, obs: Any, at: Position) -> jax.Array:
    value = outer.sample(name, fn, obs, at)
    sites.emit({name: value})
    return value


def _bottom(handler: Any) -> Any:
    """The base handler under a chain of interceptors."""
    while handler.forwards:
        handler = handler.outer()
    return handler


TRACE = fx.intercept(ppl, sample=_recorded)
BLOCK = fx.intercept(
    ppl,
    sample=lambda outer, *site: _bottom(outer).sample(*site),
    factor=lambda outer, *site: _bottom(outer).factor(*site),
)


class _Given:
    """`substitute`, `condition` or `replay`: the values to put in place come in
    through an `Ask` (traced inputs: new values never retrace), one per nesting
    depth, each with its interceptor (module-level, so static: compiled once)."""

    def __init__(self, kind: str, depth: int = 4) -> None:
        self.asks = [fx.Ask[dict[str, jax.Array]](f"ppl.{kind}{i}") for i in range(depth)]
        self.interceptors = [self._interceptor(kind, ask) for ask in self.asks]

    @staticmethod
    def _interceptor(kind: str, ask: fx.Ask[dict[str, jax.Array]]) -> fx.Interceptor[PPL]:
        if kind == "substitute":

            def param_(outer: Any, name: str, init: jax.Array, at: Position) -> Any:
                values = ask.ask()
                if name not in values:
                    return outer.param(name, init, at)
                return _at(kind, name, values[name], jnp.ndim(init), at, None)

            return fx.intercept(ppl, param=param_)

        def sample_(outer: Any, name: str, fn: dist.Distribution, obs: Any, at: Position) -> Any:
            values = ask.ask()
            if name not in values:
                return outer.sample(name, fn, obs, at)
            # a series shorter than the scan: observed while it lasts, sampled after
            # (the site stays observed, so a drawn step's density counts too, as in NumPyro)
            draw = lambda: fn.sample(rng.next_key())
            given = _at(kind, name, values[name], len(fn.shape()), at, draw)
            return outer.sample(name, fn, given, at)

        return fx.intercept(ppl, sample=sample_)

    def __call__(self, values: dict[str, jax.Array]) -> fx.Handlers:
        for ask, interceptor in zip(self.asks, self.interceptors, strict=True):
            try:
                ask.handler()
            except LookupError:  # not installed here: this depth is free
                return fx.handlers(ask.provide(values), interceptor)
        raise fx.EffectUsageError(f"more than {len(self.asks)} nested {self.asks[0].name[4:-1]}")


def trace() -> fx.Handlers:
    """`numpyro.handlers.trace`: ``values_of(hs[sites])`` after the run."""
    return fx.handlers(sites.collect(), TRACE)


def values_of(records: list[dict[str, jax.Array]]) -> dict[str, jax.Array]:
    """A trace's site values by name (a site sampled in a scan: stacked per step)."""
    return {name: value for record in records for name, value in record.items()}


substitute = _Given("substitute")  # numpyro.handlers.substitute: param sites take values
condition = _Given("condition")  # numpyro.handlers.condition: sample sites are observed
replay = _Given("replay")  # numpyro.handlers.replay: sample sites take a trace's values


def scale(factor_: float) -> fx.Interceptor[PPL]:
    """`numpyro.handlers.scale`: every log density inside is multiplied."""
    return fx.intercept(ppl, factor=lambda outer, name, lp: outer.factor(name, factor_ * lp))


def mask(keep: bool | jax.Array) -> fx.Interceptor[PPL]:
    """`numpyro.handlers.mask`: log densities where `keep` is false count zero."""
    return fx.intercept(
        ppl, factor=lambda outer, name, lp: outer.factor(name, jnp.where(keep, lp, 0.0))
    )


def block() -> fx.Interceptor[PPL]:
    """`numpyro.handlers.block`: sites inside are hidden from the handlers outside
    (they go straight to the base handler)."""
    return BLOCK


def scan(
    f: Callable[[Any, Any], tuple[Any, Any]], init: Any, xs: Any = None, length: int | None = None
) -> tuple[Any, Any]:
    """`numpyro.contrib.control_flow.scan`: `effax.scan`, with each step's index and
    the number of steps provided, so that values replayed or conditioned on are taken
    per step (a series shorter than the scan: observed, then sampled; see `_at`)."""
    # as NumPyro's: xs, or length, is needed
    n: int = jax.tree.leaves(xs)[0].shape[0] if length is None else length

    def body(carry: Any, x: Any) -> tuple[Any, Any]:
        with step.provide(x[0]), scan_length.provide(n):
            return f(carry, x[1])

    return fx.scan(body, init, (jnp.arange(n), xs))


# --- inference ------------------------------------------------------------------------


def log_density(model: Callable[..., Any], params: dict[str, jax.Array], *args: Any) -> Any:
    """`numpyro.infer.util.log_density` at these parameters and latent values."""
    with seed(0) as hs, condition(params), substitute(params):
        model(*args)
    return hs[log_joint]


def elbo(model: Callable[..., Any], guide: Callable[..., Any], params: Any, *args: Any) -> Any:
    """One particle of `Trace_ELBO`: the guide traced, the model replayed on it
    (draws from the `rng` stream installed around the call)."""
    base = (log_joint.init(jnp.float32(0)), Sampler(ppl))
    with fx.handlers(*base) as q, trace() as guide_trace, substitute(params):
        guide(*args)
    base = (log_joint.init(jnp.float32(0)), Sampler(ppl))
    with fx.handlers(*base) as p, replay(values_of(guide_trace[sites])), substitute(params):
        model(*args)
    return p[log_joint] - q[log_joint]


params = fx.State[dict[str, jax.Array]]("svi.params")
opt_state = fx.State[Any]("svi.opt_state")


def svi_step(model: Any, guide: Any, optimizer: Any) -> Callable[..., Any]:
    """A compiled SVI step on `params` and `opt_state` (States): returns the loss."""

    def loss(p: Any, *args: Any) -> Any:
        return -elbo(model, guide, p, *args)

    @fx.jit
    def update(*args: Any) -> Any:
        value, grads = fx.value_and_grad(loss)(params.get(), *args)
        updates, new_state = optimizer.update(grads, opt_state.get())
        params.set(optax.apply_updates(params.get(), updates))
        opt_state.set(new_state)
        return value

    return update


# --- models -------------------------------------------------------------------------


def normal_model(data: jax.Array) -> None:
    loc = sample("loc", dist.Normal(0.0, 1.0))
    sample("obs", dist.Normal(loc, 1.0), obs=data)


def normal_guide(data: jax.Array) -> None:
    loc, scale_log = param("guide_loc", jnp.float32(0)), param("guide_scale", jnp.float32(0))
    sample("loc", dist.Normal(loc, jnp.exp(scale_log)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a few steps only")
    steps = 50 if parser.parse_args(argv).quick else 2000
    data = 1.0 + jax.random.normal(jax.random.key(1), (20,))
    optimizer = optax.adam(0.02)
    update = svi_step(normal_model, normal_guide, optimizer)
    init = {"guide_loc": jnp.float32(0), "guide_scale": jnp.float32(0)}
    with rng.seed(0), params.init(init) as p, opt_state.init(optimizer.init(init)):
        for _ in range(steps):
            loss = update(data)
    n = data.shape[0]
    print(
        f"SVI, {steps} steps: loss {float(loss):.3f}, guide loc {float(p.value['guide_loc']):.3f}"
    )
    print(f"exact posterior mean {float(data.sum() / (n + 1)):.3f}")


if __name__ == "__main__":
    main()

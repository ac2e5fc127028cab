"""A logging layer on `Emit`: scalars and histograms, collected at the entry point."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax
import jax.numpy as jnp

import effax as fx

scalars = fx.Emit[dict[str, jax.Array]]("scalars")
histograms = fx.Emit[jax.Array]("histograms")
global_step = fx.State[jax.Array]("global_step")


@fx.uses(scalars)
def log_scalar(name: str, value: jax.Array) -> None:
    scalars.emit({name: value})


@fx.uses(scalars, histograms)
def log_weights(w: jax.Array) -> None:
    histograms.emit(w)
    log_scalar("w_norm", jnp.linalg.norm(w))


@contextlib.contextmanager
def collecting() -> Iterator[fx.Handlers]:
    """Collect scalars and histograms for the duration of the block."""
    with fx.handlers(scalars.collect(), histograms.collect()) as hs:
        yield hs


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Drop the scalars logged in the block."""
    with scalars.discard():
        yield


class MetricsLogger:
    """Prints the mean of each collected scalar."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.lines: list[str] = []

    def flush(self, hs: fx.Handlers) -> None:
        rows: list[dict[str, jax.Array]] = hs[scalars]
        keys = sorted({k for row in rows for k in row})
        for k in keys:
            mean = float(jnp.mean(jnp.stack([row[k] for row in rows if k in row])))
            self.lines.append(f"{self.prefix}/{k}: {mean:.4f}")

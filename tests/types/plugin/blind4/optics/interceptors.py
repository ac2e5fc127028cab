"""Forwarding handlers of the optics library. A helper module: no cases."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

import effax as fx
from optics.effects import acts, losses, lr


class ScaledLoss(fx.Interceptor):  # E: type-arg
    """Emits every loss times a static factor to the collector outside."""

    def __init__(self, effect: fx.Emit[jax.Array], factor: float) -> None:
        super().__init__(effect, ())
        self.factor = factor

    def emit(self, value: jax.Array) -> None:
        self.outer().emit(self.factor * value)


class WarmupLR(fx.Interceptor):  # E: type-arg
    """Answers lr as the outer lr times a static warmup fraction."""

    def __init__(self, effect: fx.Ask[jax.Array], fraction: float) -> None:
        super().__init__(effect, ())
        self.fraction = fraction

    def ask(self) -> jax.Array:
        return self.fraction * self.outer().ask()  # E: no-any-return


class Prefix(fx.Interceptor):  # E: type-arg
    """Prefixes tap sites with a block name."""

    def __init__(self, effect: fx.Tap[jax.Array], prefix: str) -> None:
        super().__init__(effect, ())
        self.prefix = prefix

    def tap(self, site: str, value: jax.Array) -> jax.Array:
        return self.outer().tap(f"{self.prefix}/{site}", value)  # E: no-any-return


def halve_losses() -> fx.Interceptor[Any]:
    return fx.intercept(losses, emit=lambda outer, v: outer.emit(0.5 * v))


double_lr = fx.intercept(lr, ask=lambda outer: 2 * outer.ask())
clip_acts = fx.intercept(acts, tap=lambda outer, site, v: outer.tap(site, jnp.clip(v, -1.0, 1.0)))

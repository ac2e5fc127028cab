"""optics: a small library of effectful layers (declarations, layers, interceptors)."""

from optics.effects import (
    LAYER_ROW,
    acts,
    bn,
    clip_at,
    lr,
    losses,
    mode,
    noise,
    step_count,
    temperature,
    verbose,
)

__all__ = [
    "LAYER_ROW",
    "acts",
    "bn",
    "clip_at",
    "losses",
    "lr",
    "mode",
    "noise",
    "step_count",
    "temperature",
    "verbose",
]

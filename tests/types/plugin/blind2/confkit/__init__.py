"""confkit: configuration and logging as effects."""

from .metrics import (
    MetricsLogger as MetricsLogger,
    collecting as collecting,
    global_step as global_step,
    histograms as histograms,
    log_scalar as log_scalar,
    log_weights as log_weights,
    quiet as quiet,
    scalars as scalars,
)
from .schema import *  # noqa: F403

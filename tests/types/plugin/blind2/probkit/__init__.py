"""probkit: sample sites, log densities and counters as effects."""

from .counting import Counter as Counter, Tally as Tally, rejections as rejections, sites as sites
from .model import (
    MODEL_ROW as MODEL_ROW,
    SAMPLE_ROW as SAMPLE_ROW,
    design as design,
    latent as latent,
    log_density as log_density,
    log_joint as log_joint,
    noise_scale as noise_scale,
    observations as observations,
    observe as observe,
    prior_draw as prior_draw,
    regression as regression,
    sample_normal as sample_normal,
    standard_normal as standard_normal,
)

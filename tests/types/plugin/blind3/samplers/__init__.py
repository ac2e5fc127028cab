"""MCMC kernels over effax's control flow."""

from samplers.kernels import log_density, mh_step, proposal_scale, samples_seen

__all__ = ["log_density", "mh_step", "proposal_scale", "samples_seen"]

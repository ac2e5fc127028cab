"""fitkit: NNX models and training loops built on the optics library."""

from fitkit.models import Block, Ensemble, Member, Stack, block_row

__all__ = ["Block", "Ensemble", "Member", "Stack", "block_row"]

"""trainer: NNX models and training loops built on the optics library."""

from trainer.models import Block, Ensemble, Member, Stack, block_row

__all__ = ["Block", "Ensemble", "Member", "Stack", "block_row"]

"""Shared pieces of the blind8 corpus: effect declarations, layers, custom effects, training."""

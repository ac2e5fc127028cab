"""Helpers of the blind5 corpus: effect declarations, layers, interceptors, training."""

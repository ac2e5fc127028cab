"""Shared code of the blind6 corpus: effect declarations, layers, interceptors and
training steps that the case files import, as a user's project would."""

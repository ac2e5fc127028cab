"""Helper package of the blind7 corpus: declarations, layers, interceptors, steps."""

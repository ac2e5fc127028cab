"""Shared declarations, layers, a custom effect and a training module for the blind10 programs."""

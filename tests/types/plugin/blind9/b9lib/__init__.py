"""Shared declarations, layers, a custom effect and a training module for the b9 corpus."""

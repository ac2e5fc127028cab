"""A small training package: effects, layers, a loop and a script."""

"""Sampling helpers used through `import sampling.lib as lib`."""

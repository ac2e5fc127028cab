"""Make JAX strict for the whole suite."""

import os

# Multi-device tests run on 8 host CPU devices; this must be set before JAX
# initialises its backends.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax
import pytest

# tests/types/ holds files that mypy checks (tests/test_typing.py); never import them.
collect_ignore_glob = ["types/*"]

jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture(autouse=True)
def _no_handlers_leak():
    """Every test starts and ends with an empty handler stack."""
    from effax import _context

    assert not _context.current_stack(), "a previous test leaked handlers"
    yield
    assert not _context.current_stack(), "this test leaked handlers"

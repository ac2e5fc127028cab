"""Make JAX strict for the whole suite."""

import jax
import pytest

jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture(autouse=True)
def _no_handlers_leak():
    """Every test starts and ends with an empty handler stack."""
    from effax import _context

    assert not _context.current_stack(), "a previous test leaked handlers"
    yield
    assert not _context.current_stack(), "this test leaked handlers"

"""examples/nnx_scan_layers.py: Flax NNX's scan-over-layers model with a Tap, an
Emit, a State and a traced Ask in the block, through the effax.nnx twins of
nnx.scan / nnx.remat / nnx.value_and_grad, against the pure NNX program (issue 41,
item 2)."""

import jax.numpy as jnp
import pytest
from flax import nnx
from helpers import assert_bitwise_equal, load_example

ex = load_example("nnx_scan_layers")


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "nnx.jit"])
def test_training_is_bitwise_the_nnx_program(compiled):
    with_effects = ex.train(True, 3, compiled)
    pure = ex.train(False, 3, compiled)
    assert_bitwise_equal(with_effects["losses"], pure["losses"])
    assert_bitwise_equal(with_effects["state"], pure["state"])  # parameters, BatchNorm
    assert_bitwise_equal(with_effects["means"], pure["means"])  # emitted == returned
    assert with_effects["calls"] == 3 * ex.LAYERS
    assert bool(
        jnp.any(nnx.state(ex.make(False)[0], nnx.BatchStat)["layers"]["bn"]["mean"][...] == 0)
    )
    assert not bool(jnp.all(pure["state"]["layers"]["bn"]["mean"][...] == 0))  # statistics moved


def test_taps_and_their_gradients_are_the_layer_outputs_and_the_perturbations():
    found = ex.taps(ex.data(1)[0][0])
    assert_bitwise_equal(found["recorded"], found["per_layer"])
    assert_bitwise_equal(*found["loss"])
    assert_bitwise_equal(*found["grads"])
    assert_bitwise_equal(*found["tap_grads"])
    assert float(jnp.max(jnp.abs(found["tap_grads"][0]))) > 0


def test_main_prints_every_comparison_true(capsys):
    ex.main(["--steps", "2"])
    out = capsys.readouterr().out
    assert "False" not in out and out.count("True") >= 10, out

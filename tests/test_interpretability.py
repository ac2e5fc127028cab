"""The example `examples/interpretability.py`: a small transformer written once with
`effax.Tap` sites, recorded, patched and attributed by handlers, against the same
analyses written by hand in plain JAX and in Flax NNX's own way (sow, a patch passed
down)."""

import contextlib
import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_bitwise_equal, load_example as load

# One quick run serves the whole file. It counts the training step's traces and
# compiles a dozen programs, so it runs without jax.checking_leaks (see conftest).
pytestmark = pytest.mark.uses_jit_cache


@pytest.fixture(scope="module")
def example():
    return load("interpretability")


@pytest.fixture(scope="module")
def figures(example, tmp_path_factory):
    printed = io.StringIO()
    # The example draws no JAX keys (NumPy initialises it): checking keys for reuse
    # would find nothing, and costs a third of its time tracing.
    with contextlib.redirect_stdout(printed), jax.debug_key_reuse(False):
        result = example.main(quick=True, out=tmp_path_factory.mktemp("out"))
    return {**result, "printed": printed.getvalue()}


def test_the_model_learns_the_sums_and_its_step_is_traced_once(figures):
    losses = figures["losses"]
    assert np.mean(losses[-5:]) < losses[0] / 10
    assert figures["accuracy"] > 0.9  # chance is 1/23
    assert figures["traces"] == 1  # taps off (acts.ignore()): one trace, one program
    assert "training step traced 1 time(s)" in figures["printed"]


def test_taps_record_what_the_hand_written_scan_outputs(example, figures):
    taps, hand = figures["taps"], figures["hand"]
    for prompt in ("clean sites", "corrupted sites"):
        assert set(taps[prompt]) == set(example.SITES)
        for site in example.SITES:
            assert_bitwise_equal(taps[prompt][site], hand[prompt][site])
    sites, L, T, D = taps["clean sites"], example.L, example.T, example.D
    assert sites["resid_pre"].shape == sites["resid_post"].shape == (L, T, D)
    assert sites["attn/head_out"].shape == (L, example.H, T, example.DH)
    # one stream, recorded in layer order: each layer starts where the last one ended
    assert_bitwise_equal(sites["resid_pre"][1:], sites["resid_post"][:-1])
    # and the last layer's output is what the logits are read from
    logits = example.unembed(figures["params"], sites["resid_post"][-1])
    ld = example.difference(logits, example.ANSWER, example.DISTRACTOR)
    assert float(ld) == pytest.approx(taps["clean"], abs=1e-5)


def test_patching_with_taps_equals_patching_by_hand(figures):
    taps, hand = figures["taps"], figures["hand"]
    assert (taps["clean"], taps["corrupted"]) == (hand["clean"], hand["corrupted"])
    np.testing.assert_allclose(taps["patched"], hand["patched"], rtol=0, atol=1e-6)
    assert figures["max_abs_diff"]["patched (taps vs hand)"] <= 1e-6


def test_patching_a_clean_head_restores_some_of_the_logit_difference(figures):
    taps = figures["taps"]
    clean, corrupted, patched = taps["clean"], taps["corrupted"], taps["patched"]
    assert clean > 0 > corrupted  # each prompt favours its own answer
    gap = clean - corrupted
    assert patched.max() > corrupted + 0.2 * gap  # some head carries the first number
    assert patched.min() < corrupted + 0.2 * gap  # and not every head does


def test_a_patch_recomputes_the_layers_after_it(example, figures):
    """A fixed replacement of every layer's heads (`acts.replace` alone) agrees with
    the masked patch (`where=`) at the last layer only: before it, the heads downstream
    of the patch must see the patched stream."""
    params, taps = figures["params"], figures["taps"]
    clean = taps["clean sites"]["attn/head_out"]
    corrupted = taps["corrupted sites"]["attn/head_out"]
    frozen = {}
    for layer in (0, example.L - 1):
        layer_h = (layer, int(np.argmax(taps["patched"][layer])))
        rows = corrupted.at[layer_h].set(clean[layer_h])
        with example.acts.replace({"attn/head_out": rows}):
            frozen[layer] = float(example.run(params, example.prompt(example.CORRUPTED)))
        frozen[layer, "patched"] = taps["patched"][layer_h]
    last = example.L - 1
    assert frozen[last] == pytest.approx(frozen[last, "patched"], abs=1e-5)
    assert abs(frozen[0] - frozen[0, "patched"]) > 0.1


def test_gradient_attribution_with_taps_equals_jax_grad_by_hand(example, figures):
    taps, hand = figures["taps"], figures["hand"]
    assert taps["attribution"].shape == (example.L,)
    np.testing.assert_allclose(taps["attribution"], hand["attribution"], rtol=1e-6, atol=1e-6)
    # the gradients are with respect to the stream itself: after the last layer a
    # LayerNorm follows, blind to the stream's scale, so gradient . stream ~ 0 there
    assert abs(taps["attribution"][-1]) < 1e-4 * np.abs(taps["attribution"]).max()


def test_nnx_modules_with_taps_agree_with_nnx_sow_and_a_patch_by_hand(example, figures):
    nnx_taps, sow, taps = figures["nnx_taps"], figures["nnx_sow"], figures["taps"]
    for site in example.SITES:
        assert_bitwise_equal(nnx_taps["clean sites"][site], sow["clean sites"][site])
        # the same model as the plain JAX one, its layers in a Python loop
        np.testing.assert_allclose(
            nnx_taps["clean sites"][site], taps["clean sites"][site], rtol=0, atol=1e-5
        )
    assert nnx_taps["clean"] == sow["clean"]
    np.testing.assert_allclose(nnx_taps["patched"], sow["patched"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(nnx_taps["patched"], taps["patched"], rtol=0, atol=1e-4)


def test_main_prints_both_versions_and_saves_the_heatmap(figures):
    lines = figures["lines"]
    assert set(lines) == {"taps", "hand", "nnx taps", "nnx own"}
    assert all(n > 10 for n in lines.values()), lines
    assert figures["max_abs_diff"]["recorded (taps vs hand)"] == 0.0
    printed = figures["printed"]
    assert f"{'lines (model + analyses)':26}{lines['taps']:10d}{lines['hand']:10d}" in printed
    assert "patched layer 2 head 3" in printed
    assert figures["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert jnp.isfinite(jnp.asarray(figures["losses"])).all()

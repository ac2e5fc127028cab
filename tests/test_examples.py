"""Every example script runs, in its quick mode, and shows what it claims."""

import numpy as np
from helpers import EXAMPLES, load_example as load


def test_counter_counts_and_traces_once(capsys):
    counter = load("counter")
    assert counter.main(3) == [1, 2, 3]
    assert len(counter.traces) == 1
    out = capsys.readouterr().out
    assert "plain object under jax.jit: [1, 1, 1]" in out


def test_readme_example_runs():
    readme = (EXAMPLES.parent / "README.md").read_text()
    blocks = [b.split("```", 1)[0] for b in readme.split("```python\n")[1:]]
    assert blocks, "the README has a Python example"
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    assert int(namespace["hs"][namespace["steps"]]) == 2
    assert len(namespace["hs"][namespace["aux_loss"]]) == 2


def test_mlp_regression_learns_and_saves_its_loss_curve(tmp_path, capsys):
    mlp = load("mlp_regression")
    png = tmp_path / "loss.png"
    result = mlp.main(200, png=png)
    losses = result["losses"]
    assert len(losses) == 200
    first, last = sum(losses[:20]) / 20, sum(losses[-20:]) / 20
    assert last < first / 5, (first, last)
    assert result["test_after"] < result["test_before"] / 10
    assert result["keys_drawn"] == 2 * 200  # two dropout layers, one key each per step
    assert len(mlp.traces) == 1  # the training step was traced once
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "step     0" in out and "step   199" in out
    assert "traced 1 time(s)" in out


def test_resume_training_resumes_bit_for_bit_from_an_orbax_checkpoint(tmp_path, capsys):
    resume = load("resume_training")
    result = resume.main(40, 15, out=tmp_path)
    assert result["same"] and len(result["resumed"]) == 40
    assert result["uninterrupted"][-1] < result["uninterrupted"][0]
    assert (tmp_path / "checkpoint").is_dir()
    assert "bit for bit: True" in capsys.readouterr().out


def test_batchnorm_running_statistics_track_the_data():
    bn = load("batchnorm_equinox")
    result = bn.main(150)
    np.testing.assert_allclose(result["running_mean"], bn.DATA_MEAN, atol=0.3)
    np.testing.assert_allclose(result["running_var"], bn.DATA_STD**2, rtol=0.25)
    losses = result["losses"]
    assert sum(losses[-30:]) / 30 < sum(losses[:30]) / 30
    assert result["test_after"] < result["test_before"] / 3
    # evaluating with running statistics is about as good as with the test batch's own
    assert abs(result["test_after"] - result["test_batch_stats"]) < 0.1
    # one dropout mask per training step, one for the evaluation with batch statistics
    assert result["keys_drawn"] == 150 + 1
    assert result["traces"] == 1  # eqx.filter_jit compiled the step once


def test_sharded_step_splits_the_batch_and_matches_one_device():
    sharded = load("sharded_step")
    result = sharded.main(20)
    np.testing.assert_allclose(result["sharded_losses"], result["single_losses"], rtol=1e-5)
    np.testing.assert_allclose(
        result["sharded_params"]["w"], result["single_params"]["w"], rtol=1e-5, atol=1e-6
    )
    assert result["sharded_losses"][-1] < result["sharded_losses"][0] / 100
    w = result["sharded_params"]["w"]
    assert len(w.sharding.device_set) == sharded.N_DEVICES
    assert w.sharding.is_fully_replicated
    # shard_map: the loss falls, one key drawn per step, per-device losses stacked
    assert result["mapped_losses"][-1] < result["mapped_losses"][0] / 2
    assert result["keys_drawn"] == 20
    last = np.asarray(result["device_losses"][-1])
    assert last.shape == (sharded.N_DEVICES,)
    assert len(set(last.round(6).tolist())) == sharded.N_DEVICES  # distinct keys per device


def test_langevin_sampler_matches_the_target_moments():
    langevin = load("langevin")
    result = langevin.main(500)
    np.testing.assert_allclose(result["mean"], langevin.TARGET_MEAN, atol=0.05)
    np.testing.assert_allclose(result["var"], langevin.TARGET_STD**2, rtol=0.1)
    rates = np.asarray(result["accept_rates"])
    assert rates.shape == (500,)  # emitted once per step, stacked by effax.scan
    assert 0.4 < rates.mean() < 0.95
    assert result["keys_drawn"] == 2 * 500
    assert result["transparent"]


def test_every_example_is_tested():
    tested = {
        "counter",
        "mlp_regression",
        "batchnorm_equinox",
        "sharded_step",
        "langevin",
        "resume_training",
    }
    # tested in files of their own, with the library each one is ported from
    tested |= {"flax_nnx_cnn", "svi", "metropolis", "ppl", "interpretability", "haiku_resnet"}
    tested |= {"nnx_scan_layers"}  # tests/test_nnx_example.py
    scripts = {p.stem for p in EXAMPLES.glob("*.py") if not p.stem.startswith("_")}
    assert scripts == tested

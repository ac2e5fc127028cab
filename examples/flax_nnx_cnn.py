"""The CNN of Flax's NNX MNIST tutorial, three ways: as written, with effax for its
context, and with effax alone.

The model, optimiser and hyperparameters are those of the tutorial
(``docs_nnx/mnist_tutorial.md`` in google/flax). The data is synthetic, of MNIST's
shapes (28x28x1 images, 10 classes): each class is a template of a few blurred
strokes, and every image is its class's template, shifted, rescaled and noisy. It is
made deterministically with NumPy: nothing is downloaded.

(a) **original**: the tutorial's code as is: ``nnx.Dropout`` draws its keys from an
    ``nnx.Rngs`` passed to the step, ``nnx.view`` makes a training and an evaluation
    view of the model, an ``nnx.MultiMetric`` accumulates loss and accuracy, and
    ``nnx.jit`` compiles the steps.
(b) **hybrid**: Flax's layers, ``nnx.Optimizer`` and ``nnx.jit`` kept, for the module
    state (parameters, batch statistics, optimiser state). What is *context* becomes
    an effect: dropout keys come from an ``effax.RandomKey``, training or evaluation
    is a static ``effax.Ask[bool]`` (no views, no ``model.train()``), and loss and
    accuracy are emitted through ``effax.Emit`` and collected by the caller. The
    steps are compiled with ``effax.handle(step, transform=nnx.jit)``. Its dropout
    keys are the original's (``nnx.Rngs(0)`` draws ``fold_in(key(0), count)``, as
    ``dropout.seed(0)`` does), so its per-step losses equal the original's exactly.
(c) **pure effax**: no Flax. Parameters, batch statistics and the optimiser state
    live in ``effax.State`` cells, five small layer functions stand in for Flax's
    layers, and ``effax.jit`` compiles the steps.

All three are trained on the same batches and evaluated on the same held-out set;
``main`` prints a table of accuracies, time per step and lines of code.

Run: python examples/flax_nnx_cnn.py [--quick] [--steps N] [--batch-size B] [--out DIR]
"""

from __future__ import annotations

import argparse
import inspect
import pathlib
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import effax as fx

Batch = dict[str, jax.Array]

# the tutorial's hyperparameters
learning_rate = 0.005
momentum = 0.9
DROPOUT_RATE = 0.025

# --- the data: synthetic digits of MNIST's shapes ----------------------------------

N_CLASSES = 10


def make_templates(seed: int = 0) -> np.ndarray:
    """One 28x28 template per class: three blurred strokes at random places."""
    rng = np.random.default_rng(seed)
    grid = np.arange(28.0)
    yy, xx = np.meshgrid(grid, grid, indexing="ij")
    templates = np.zeros((N_CLASSES, 28, 28), np.float32)
    for c in range(N_CLASSES):
        for _ in range(3):
            (y0, x0), (y1, x1) = rng.uniform(6.0, 22.0, size=(2, 2))
            for t in np.linspace(0.0, 1.0, 8):  # a stroke: blobs along a segment
                y, x = y0 + t * (y1 - y0), x0 + t * (x1 - x0)
                templates[c] += np.exp(-((yy - y) ** 2 + (xx - x) ** 2) / 4.0)
    return np.clip(templates / templates.max(axis=(1, 2), keepdims=True), 0.0, 1.0)


def make_dataset(
    n: int, seed: int, templates: np.ndarray, *, noise: float = 0.3, shift: int = 2
) -> Batch:
    """`n` images of random classes: a template shifted by up to `shift` pixels,
    rescaled, plus Gaussian noise, clipped to [0, 1] like MNIST's normalised pixels."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, N_CLASSES, n)
    shifts = rng.integers(-shift, shift + 1, (n, 2))
    contrast = rng.uniform(0.6, 1.2, (n, 1, 1))
    images = np.stack(
        [np.roll(templates[c], tuple(s), axis=(0, 1)) for c, s in zip(labels, shifts, strict=True)]
    )
    images = images * contrast + rng.normal(0.0, noise, images.shape)
    images = np.clip(images, 0.0, 1.0).astype(np.float32)[..., None]
    return {"image": jnp.asarray(images), "label": jnp.asarray(labels, np.int32)}


def make_batches(ds: Batch, batch_size: int) -> Iterator[Batch]:
    """Batches of `ds` in order, dropping an incomplete last one (as the tutorial)."""
    for i in range(0, len(ds["label"]) - batch_size + 1, batch_size):
        yield {k: v[i : i + batch_size] for k, v in ds.items()}


# --- (a) the original: the tutorial's code -----------------------------------------


class CNN(nnx.Module):
    """A simple CNN model."""

    def __init__(self, *, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(1, 32, kernel_size=(3, 3), rngs=rngs)
        self.batch_norm1 = nnx.BatchNorm(32, rngs=rngs)
        self.dropout1 = nnx.Dropout(rate=DROPOUT_RATE)
        self.conv2 = nnx.Conv(32, 64, kernel_size=(3, 3), rngs=rngs)
        self.batch_norm2 = nnx.BatchNorm(64, rngs=rngs)
        self.avg_pool = partial(nnx.avg_pool, window_shape=(2, 2), strides=(2, 2))
        self.linear1 = nnx.Linear(3136, 256, rngs=rngs)
        self.dropout2 = nnx.Dropout(rate=DROPOUT_RATE)
        self.linear2 = nnx.Linear(256, 10, rngs=rngs)

    def __call__(self, x: jax.Array, rngs: nnx.Rngs | None = None) -> jax.Array:
        x = self.avg_pool(nnx.relu(self.batch_norm1(self.dropout1(self.conv1(x), rngs=rngs))))
        x = self.avg_pool(nnx.relu(self.batch_norm2(self.conv2(x))))
        x = x.reshape(x.shape[0], -1)  # flatten
        x = nnx.relu(self.dropout2(self.linear1(x), rngs=rngs))
        x = self.linear2(x)
        return x


def loss_fn(model: CNN, batch: Batch, rngs: nnx.Rngs | None = None) -> tuple[jax.Array, jax.Array]:
    logits = model(batch["image"], rngs)
    loss = optax.softmax_cross_entropy_with_integer_labels(
        logits=logits, labels=batch["label"]
    ).mean()
    return loss, logits


@nnx.jit
def train_step(
    model: CNN,
    optimizer: nnx.Optimizer[CNN],
    metrics: nnx.MultiMetric,
    rngs: nnx.Rngs,
    batch: Batch,
) -> jax.Array:
    """Train for a single step."""
    grad_fn = nnx.value_and_grad(loss_fn, has_aux=True)
    (loss, logits), grads = grad_fn(model, batch, rngs)
    metrics.update(loss=loss, logits=logits, labels=batch["label"])  # In-place updates.
    optimizer.update(model, grads)  # In-place updates.
    return loss  # not in the tutorial: the per-step loss, to compare the variants


@nnx.jit
def eval_step(model: CNN, metrics: nnx.MultiMetric, batch: Batch) -> None:
    loss, logits = loss_fn(model, batch)
    metrics.update(loss=loss, logits=logits, labels=batch["label"])  # In-place updates.


ORIGINAL_CODE = (CNN, loss_fn, train_step, eval_step)  # model and steps, for lines of code


# --- (b) the hybrid: Flax's layers, effax's context --------------------------------

# The effects, declared once. The pure variant below performs the same ones.
dropout = fx.RandomKey("dropout")
training = fx.Ask[bool]("training", static=True)  # static: each value traces its program
metrics_log = fx.Emit[dict[str, jax.Array]]("metrics")


class HybridCNN(CNN):
    """The tutorial's CNN with the same layers (it inherits `__init__`); its call
    asks whether it is training and draws dropout keys from the `dropout` stream."""

    def __call__(self, x: jax.Array) -> jax.Array:  # type: ignore[override]
        eval_mode = not training.ask()
        x = self.drop(self.dropout1, self.conv1(x))
        x = self.avg_pool(nnx.relu(self.batch_norm1(x, use_running_average=eval_mode)))
        x = self.avg_pool(nnx.relu(self.batch_norm2(self.conv2(x), use_running_average=eval_mode)))
        x = x.reshape(x.shape[0], -1)  # flatten
        x = nnx.relu(self.drop(self.dropout2, self.linear1(x)))
        return self.linear2(x)

    @staticmethod
    def drop(layer: nnx.Dropout, x: jax.Array) -> jax.Array:
        if not training.ask():
            return x
        return layer(x, deterministic=False, rngs=dropout.next_key())


def hybrid_loss_fn(model: HybridCNN, batch: Batch) -> tuple[jax.Array, jax.Array]:
    logits = model(batch["image"])
    loss = optax.softmax_cross_entropy_with_integer_labels(
        logits=logits, labels=batch["label"]
    ).mean()
    return loss, logits


def emit_metrics(loss: jax.Array, logits: jax.Array, labels: jax.Array) -> None:
    accuracy = jnp.mean(jnp.argmax(logits, axis=-1) == labels)
    metrics_log.emit({"loss": loss, "accuracy": accuracy})


def hybrid_train_step(model: HybridCNN, optimizer: nnx.Optimizer[HybridCNN], batch: Batch) -> None:
    grad_fn = nnx.value_and_grad(hybrid_loss_fn, has_aux=True)
    (loss, logits), grads = grad_fn(model, batch)
    emit_metrics(loss, logits, batch["label"])
    optimizer.update(model, grads)  # module state: nnx.jit carries it in and out


def hybrid_eval_step(model: HybridCNN, batch: Batch) -> None:
    loss, logits = hybrid_loss_fn(model, batch)
    emit_metrics(loss, logits, batch["label"])


# nnx.jit plumbs the modules; effax plumbs the handlers' values around it.
hybrid_train = fx.handle(hybrid_train_step, transform=nnx.jit)
hybrid_eval = fx.handle(hybrid_eval_step, transform=nnx.jit)

HYBRID_CODE = (
    CNN.__init__,
    HybridCNN,
    hybrid_loss_fn,
    emit_metrics,
    hybrid_train_step,
    hybrid_eval_step,
)


# --- (c) pure effax: no Flax --------------------------------------------------------

Params = dict[str, dict[str, jax.Array]]
Stats = dict[str, dict[str, jax.Array]]  # per BatchNorm layer: running mean and variance

params = fx.State[Params]("params")
batch_stats = fx.State[Stats]("batch_stats")
opt_state = fx.State[optax.OptState]("opt_state")


def conv(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    dims = ("NHWC", "HWIO", "NHWC")
    y = jax.lax.conv_general_dilated(x, p["kernel"], (1, 1), "SAME", dimension_numbers=dims)
    return y + p["bias"][None, None, None, :]


def batch_norm(
    name: str, p: dict[str, jax.Array], x: jax.Array, momentum: float = 0.99
) -> jax.Array:
    """Normalises each channel of `x` (NHWC) over the batch and the image."""
    ra = batch_stats.get()[name]  # this layer's running averages
    if training.ask():
        mean, var = jnp.mean(x, axis=(0, 1, 2)), jnp.var(x, axis=(0, 1, 2))
        m = momentum
        new = {"mean": m * ra["mean"] + (1 - m) * mean, "var": m * ra["var"] + (1 - m) * var}
        batch_stats.modify(lambda s: {**s, name: jax.lax.stop_gradient(new)})
    else:
        mean, var = ra["mean"], ra["var"]
    scale = p["scale"] * jax.lax.rsqrt(var + 1e-5)
    shift = p["bias"] - mean * scale
    return x * scale[None, None, None, :] + shift[None, None, None, :]


def dense(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    return x @ p["kernel"] + p["bias"][None, :]


def dropout_layer(x: jax.Array, rate: float = DROPOUT_RATE) -> jax.Array:
    if not training.ask():
        return x
    keep = jax.random.bernoulli(dropout.next_key(), 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def avg_pool(x: jax.Array) -> jax.Array:  # 2x2 windows, stride 2
    n, h, w, c = x.shape
    return x.reshape(n, h // 2, 2, w // 2, 2, c).mean(axis=(2, 4))


def cnn(p: Params, x: jax.Array) -> jax.Array:
    x = avg_pool(jax.nn.relu(batch_norm("bn1", p["bn1"], dropout_layer(conv(p["conv1"], x)))))
    x = avg_pool(jax.nn.relu(batch_norm("bn2", p["bn2"], conv(p["conv2"], x))))
    x = x.reshape(x.shape[0], -1)  # flatten
    x = jax.nn.relu(dropout_layer(dense(p["linear1"], x)))
    return dense(p["linear2"], x)


def init_cnn(key: jax.Array) -> tuple[Params, Stats]:
    """Parameters initialised as Flax does (LeCun normal kernels, zero biases)."""
    init = jax.nn.initializers.lecun_normal()
    shapes = {
        "conv1": (3, 3, 1, 32),
        "conv2": (3, 3, 32, 64),
        "linear1": (3136, 256),
        "linear2": (256, 10),
    }
    keys = jax.random.split(key, len(shapes))
    p = {
        name: {"kernel": init(k, shape), "bias": jnp.zeros(shape[-1])}
        for k, (name, shape) in zip(keys, shapes.items(), strict=True)
    }
    stats = {}
    for name, size in (("bn1", 32), ("bn2", 64)):
        p[name] = {"scale": jnp.ones(size), "bias": jnp.zeros(size)}
        stats[name] = {"mean": jnp.zeros(size), "var": jnp.ones(size)}
    return p, stats


def pure_loss_fn(p: Params, batch: Batch) -> tuple[jax.Array, jax.Array]:
    logits = cnn(p, batch["image"])
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()
    return loss, logits


tx = optax.adamw(learning_rate, momentum)


@fx.jit
def pure_train_step(batch: Batch) -> None:
    p = params.get()
    (loss, logits), grads = fx.value_and_grad(pure_loss_fn, has_aux=True)(p, batch)
    updates, new_opt_state = tx.update(grads, opt_state.get(), p)
    params.set(optax.apply_updates(p, updates))
    opt_state.set(new_opt_state)
    emit_metrics(loss, logits, batch["label"])


@fx.jit
def pure_eval_step(batch: Batch) -> None:
    loss, logits = pure_loss_fn(params.get(), batch)
    emit_metrics(loss, logits, batch["label"])


PURE_CODE = (
    conv,
    batch_norm,
    dense,
    dropout_layer,
    avg_pool,
    cnn,
    init_cnn,
    pure_loss_fn,
    emit_metrics,
    pure_train_step,
    pure_eval_step,
)


# --- the runs -------------------------------------------------------------------------


class Timer:
    """Seconds per step after the first (compiling) step, measured to `stop()`."""

    def __init__(self) -> None:
        self.start = 0.0
        self.steps = 0

    def tick(self, out: Any) -> None:
        self.steps += 1
        if self.steps == 1:  # the first step compiled; time the rest
            jax.block_until_ready(out)
            self.start = time.perf_counter()

    def stop(self, out: Any) -> float:
        jax.block_until_ready(out)
        return (time.perf_counter() - self.start) / max(1, self.steps - 1)


def run_original(train_ds: Batch, test_ds: Batch, batch_size: int) -> dict[str, Any]:
    model = CNN(rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(learning_rate, momentum), wrt=nnx.Param)
    metrics = nnx.MultiMetric(
        accuracy=nnx.metrics.Accuracy(),
        loss=nnx.metrics.Average("loss"),
    )
    train_model = nnx.view(model, deterministic=False, use_running_average=False)
    eval_model = nnx.view(model, deterministic=True, use_running_average=True)
    rngs = nnx.Rngs(0)
    timer, losses = Timer(), []
    for batch in make_batches(train_ds, batch_size):
        losses.append(train_step(train_model, optimizer, metrics, rngs, batch))
        timer.tick(losses[-1])
    seconds = timer.stop(losses)
    train = metrics.compute()
    metrics.reset()
    for test_batch in make_batches(test_ds, batch_size):
        eval_step(eval_model, metrics, test_batch)
    test = metrics.compute()
    return {
        "losses": [float(v) for v in losses],
        "train_loss": float(train["loss"]),
        "train_accuracy": float(train["accuracy"]),
        "test_accuracy": float(test["accuracy"]),
        "seconds_per_step": seconds,
        "keys_drawn": int(rngs.default.count[...]),
    }


def averages(logged: list[dict[str, jax.Array]]) -> dict[str, float]:
    """Each emitted metric averaged over the steps (what `nnx.MultiMetric` computes
    for equal batches)."""
    return {k: float(np.mean([float(m[k]) for m in logged])) for k in logged[0]}


def summary(hs: fx.Handlers, ev: fx.Handlers, seconds: float) -> dict[str, Any]:
    """An effax variant's results, from its training and evaluation handlers."""
    train, test = averages(hs[metrics_log]), averages(ev[metrics_log])
    return {
        "losses": [float(m["loss"]) for m in hs[metrics_log]],
        "train_loss": train["loss"],
        "train_accuracy": train["accuracy"],
        "test_accuracy": test["accuracy"],
        "seconds_per_step": seconds,
        "keys_drawn": hs[dropout].counter,
    }


def run_hybrid(train_ds: Batch, test_ds: Batch, batch_size: int) -> dict[str, Any]:
    model = HybridCNN(rngs=nnx.Rngs(0))  # the original's initial parameters
    optimizer = nnx.Optimizer(model, optax.adamw(learning_rate, momentum), wrt=nnx.Param)
    timer = Timer()
    # the original's dropout keys: nnx.Rngs(0) draws fold_in(key(0), count), as this does
    with fx.handlers(dropout.seed(0), training.provide(True), metrics_log.collect()) as hs:
        for batch in make_batches(train_ds, batch_size):
            hybrid_train(model, optimizer, batch)
            timer.tick(hs[metrics_log][-1])
    seconds = timer.stop(hs[metrics_log])
    with fx.handlers(training.provide(False), metrics_log.collect()) as ev:
        for test_batch in make_batches(test_ds, batch_size):
            hybrid_eval(model, test_batch)
    return summary(hs, ev, seconds)


def run_pure(train_ds: Batch, test_ds: Batch, batch_size: int) -> dict[str, Any]:
    p0, stats0 = init_cnn(jax.random.key(0))
    timer = Timer()
    with fx.handlers(params.init(p0), batch_stats.init(stats0), opt_state.init(tx.init(p0))):
        with fx.handlers(dropout.seed(0), training.provide(True), metrics_log.collect()) as hs:
            for batch in make_batches(train_ds, batch_size):
                pure_train_step(batch)
                timer.tick(hs[metrics_log][-1])
        seconds = timer.stop(hs[metrics_log])
        with fx.handlers(training.provide(False), metrics_log.collect()) as ev:
            for test_batch in make_batches(test_ds, batch_size):
                pure_eval_step(test_batch)
    return summary(hs, ev, seconds)


VARIANTS = {  # each variant's run, and its model and steps (to count their lines)
    "original": (run_original, ORIGINAL_CODE),
    "hybrid": (run_hybrid, HYBRID_CODE),
    "pure effax": (run_pure, PURE_CODE),
}


def lines_of_code(objects: tuple[Any, ...]) -> int:
    """Non-blank, non-comment source lines of `objects`."""
    lines = []
    for obj in objects:
        lines += inspect.getsource(inspect.unwrap(obj)).splitlines()
    return sum(1 for line in lines if line.strip() and not line.strip().startswith("#"))


def save_curves(runs: dict[str, dict[str, Any]], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, run in runs.items():
        window = max(1, len(run["losses"]) // 30)  # a moving average over the noise
        smooth = np.convolve(run["losses"], np.ones(window) / window, mode="valid")
        ax.plot(smooth, label=name, linestyle="--" if name == "hybrid" else "-")
    ax.set(xlabel="step", ylabel="training loss (moving average)", yscale="log")
    ax.set_title("The NNX tutorial's CNN on synthetic digits")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(
    steps: int | None = None,
    *,
    batch_size: int | None = None,
    n_test: int | None = None,
    quick: bool = False,
    out: str | pathlib.Path | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Train the three variants on the same synthetic data; print and return a table.

    `quick` makes a tiny run (few steps of small batches); `out`, if given, is a
    folder where the three loss curves are saved as ``flax_nnx_cnn.png``.
    """
    steps = steps or (60 if quick else 600)
    batch_size = batch_size or (16 if quick else 32)
    n_test = n_test or (256 if quick else 1024)
    templates = make_templates(seed)
    train_ds = make_dataset(steps * batch_size, seed + 1, templates)
    test_ds = make_dataset(n_test, seed + 2, templates)

    # Flax initialises a model eagerly, op by op: build one first, so that the ~80
    # small programs this compiles are not counted in the first variant's time.
    CNN(rngs=nnx.Rngs(0))
    runs = {}
    for name, (run, code) in VARIANTS.items():
        start = time.perf_counter()
        runs[name] = run(train_ds, test_ds, batch_size)
        runs[name]["total_seconds"] = time.perf_counter() - start  # compiles included
        runs[name]["lines"] = lines_of_code(code)

    print(f"{steps} steps of {batch_size} synthetic digits; test set of {n_test}; chance 0.10")
    print(f"{'variant':<11} {'train loss':>10} {'test acc':>9} {'ms/step':>8} {'total s':>8} lines")
    for name, r in runs.items():
        print(
            f"{name:<11} {r['train_loss']:>10.4f} {r['test_accuracy']:>9.3f} "
            f"{1e3 * r['seconds_per_step']:>8.1f} {r['total_seconds']:>8.1f} {r['lines']:>5d}"
        )
    same = runs["hybrid"]["losses"] == runs["original"]["losses"]
    print(f"hybrid losses equal the original's, step for step: {same}")
    result: dict[str, Any] = {
        "losses": {name: r["losses"] for name, r in runs.items()},
        "accuracy": {name: r["test_accuracy"] for name, r in runs.items()},
        "train_loss": {name: r["train_loss"] for name, r in runs.items()},
        "train_accuracy": {name: r["train_accuracy"] for name, r in runs.items()},
        "ms_per_step": {name: 1e3 * r["seconds_per_step"] for name, r in runs.items()},
        "lines": {name: r["lines"] for name, r in runs.items()},
        "keys_drawn": {name: r["keys_drawn"] for name, r in runs.items()},
        "same_losses": same,
    }
    if out is not None:
        folder = pathlib.Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        result["png"] = folder / "flax_nnx_cnn.png"
        save_curves(runs, result["png"])
        print(f"loss curves saved to {result['png']}")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a tiny run (60 steps of 16)")
    parser.add_argument("--steps", type=int, default=None, help="training steps")
    parser.add_argument("--batch-size", type=int, default=None, help="images per step")
    parser.add_argument("--out", default="examples/out", help="folder for the loss-curve plot")
    args = parser.parse_args()
    main(args.steps, batch_size=args.batch_size, quick=args.quick, out=args.out)

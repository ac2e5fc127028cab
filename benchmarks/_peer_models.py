"""The models of case 6 (``bench_peers.py``), each written once per library.

Every model has the same shape, so that one trainer per library serves them all:
``features`` (everything up to a hidden layer ``h``), a running mean of ``h`` kept
as state (``m = 0.9 m + 0.1 mean(h)``, not differentiated), dropout on ``h`` whose
rate is a configuration value, then ``head``; a loss; plain SGD (in the trainers).

- ``MLP``: ``x -> relu(x @ w1 + b1)``, then ``@ w2 + b2``; mean squared error.
- ``CNN``: the CNN of Flax's NNX MNIST tutorial at half its widths (conv 3x3, 16
  channels -> relu -> avg_pool -> conv 3x3, 32 -> relu -> avg_pool -> flatten ->
  dense 128 -> relu = ``h``), then dense 10; softmax cross-entropy; MNIST-shaped
  synthetic batches (28x28x1 images, 10 classes).

Parameters are canonical in one layout, Haiku's: ``{layer: {"w": ..., "b": ...}}``,
convolution kernels HWIO, dense weights (in, out), images NHWC. effax, the
hand-plumbed step and NumPyro call the pure ``features``/``head``; Flax NNX, Haiku
and Equinox build the model from their own layers (``nnx_layers``,
``haiku_features``/``haiku_head``, ``equinox_layers``), loaded from and read back
into the canonical layout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

Params = dict[str, dict[str, jax.Array]]
Batches = list[tuple[jax.Array, jax.Array]]

MOMENTUM = 0.9


class Model(NamedTuple):
    """One model, in every library; the trainers of ``bench_peers.py`` take it."""

    name: str  # "MLP", "CNN"
    suffix: str  # appended to the contender names ("" for the MLP)
    hidden: int  # width of h: the running mean's shape
    initial_params: Callable[[], Params]
    make_batches: Callable[[int], Batches]
    # pure: effax, the hand-plumbed step, NumPyro
    features: Callable[[Params, jax.Array], jax.Array]
    head: Callable[[Params, jax.Array], jax.Array]
    loss: Callable[[jax.Array, jax.Array], jax.Array]
    # in each library's own layers (imported when called)
    nnx_layers: Callable[[Params], Any]  # an nnx.Module: .features(x), .head(h)
    haiku_features: Callable[[jax.Array], jax.Array]  # inside hk.transform
    haiku_head: Callable[[jax.Array], jax.Array]
    equinox_layers: Callable[[Params], Any]  # an eqx.Module, one example: .features, .head


# --- shared pieces ------------------------------------------------------------------


def running(mean: jax.Array, h_: jax.Array) -> jax.Array:
    return MOMENTUM * mean + (1 - MOMENTUM) * jnp.mean(jax.lax.stop_gradient(h_), axis=0)


def dropout_mask(key: jax.Array, rate: float, h_: jax.Array) -> jax.Array:
    keep = jax.random.bernoulli(key, 1.0 - rate, h_.shape)
    return jnp.where(keep, h_ / (1.0 - rate), 0.0)


def dense(x: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
    return x @ p["w"] + p["b"][None, :]


def conv(x: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
    """3x3 ``SAME`` convolution, NHWC / HWIO, as Flax's and Haiku's."""
    y = jax.lax.conv_general_dilated(
        x, p["w"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    return y + p["b"][None, None, None, :]


def avg_pool(x: jax.Array) -> jax.Array:
    """2x2 average pooling, stride 2, NHWC."""
    window = (1, 2, 2, 1)
    summed: jax.Array = jax.lax.reduce_window(x, 0.0, jax.lax.add, window, window, "VALID")
    return summed / 4.0


def mse(out: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((out - y) ** 2)


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    log_p = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(log_p, labels[:, None], axis=1))


def _normal(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> jax.Array:
    return jnp.asarray(rng.normal(size=shape) / np.sqrt(fan_in), jnp.float32)


def _bias(rng: np.random.Generator, n: int) -> jax.Array:
    return jnp.asarray(rng.normal(size=(n,)) * 0.1, jnp.float32)


# --- each library's layers, loaded from and read back into the canonical layout ------


def nnx_layer(kind: Any, p: dict[str, jax.Array], **kwargs: Any) -> Any:
    """An ``nnx.Linear`` or ``nnx.Conv`` holding the canonical ``p`` (initialised to
    it: no random initialiser runs, eagerly, only to be overwritten)."""
    from flax import nnx

    return kind(
        *p["w"].shape[-2:],
        **kwargs,
        kernel_init=lambda *_: p["w"],
        bias_init=lambda *_: p["b"],
        rngs=nnx.Rngs(0),
    )


def nnx_params(layers: Any, names: Iterable[str]) -> Params:
    return {
        n: {"w": getattr(layers, n).kernel[...], "b": getattr(layers, n).bias[...]} for n in names
    }


def _equinox_layer(kind: Any, *args: Any, **kwargs: Any) -> Any:
    """An abstract Equinox layer (shapes only: no random initialiser runs, eagerly,
    only to be overwritten), to be filled with ``eqx.tree_at``."""
    import equinox as eqx

    return eqx.filter_eval_shape(kind, *args, **kwargs, key=jax.random.key(0))


def equinox_linear(p: dict[str, jax.Array]) -> Any:
    import equinox as eqx

    layer = _equinox_layer(eqx.nn.Linear, *p["w"].shape)
    return eqx.tree_at(lambda m: (m.weight, m.bias), layer, (p["w"].T, p["b"]))


def equinox_conv(p: dict[str, jax.Array]) -> Any:
    """An ``eqx.nn.Conv2d`` (channel-first: OIHW kernel, (C, 1, 1) bias) holding ``p``."""
    import equinox as eqx

    kh, kw, c_in, c_out = p["w"].shape
    layer = _equinox_layer(eqx.nn.Conv2d, c_in, c_out, (kh, kw), padding="SAME")
    weight, bias = p["w"].transpose(3, 2, 0, 1), p["b"][:, None, None]
    return eqx.tree_at(lambda m: (m.weight, m.bias), layer, (weight, bias))


def equinox_params(layers: Any, names: Iterable[str]) -> Params:
    import equinox as eqx

    def canonical(layer: Any) -> dict[str, jax.Array]:
        if isinstance(layer, eqx.nn.Conv2d):
            assert layer.bias is not None
            return {"w": layer.weight.transpose(2, 3, 1, 0), "b": layer.bias.reshape(-1)}
        return {"w": layer.weight.T, "b": layer.bias}

    return {n: canonical(getattr(layers, n)) for n in names}


# --- the MLP -------------------------------------------------------------------------

D_IN, D_HIDDEN, D_OUT, BATCH = 16, 32, 1, 32


def mlp_params() -> Params:
    rng = np.random.default_rng(0)
    return {
        "l1": {"w": _normal(rng, (D_IN, D_HIDDEN), D_IN), "b": _bias(rng, D_HIDDEN)},
        "l2": {
            "w": _normal(rng, (D_HIDDEN, D_OUT), D_HIDDEN),
            "b": jnp.zeros((D_OUT,), jnp.float32),
        },
    }


def mlp_batches(n: int) -> Batches:
    rng = np.random.default_rng(1)
    out = []
    for _ in range(n):
        x = rng.normal(size=(BATCH, D_IN)).astype(np.float32)
        y = np.sin(x.sum(axis=1, keepdims=True)).astype(np.float32)
        out.append((jnp.asarray(x), jnp.asarray(y)))
    return out


def nnx_mlp(params: Params) -> Any:
    from flax import nnx

    class Layers(nnx.Module):
        def __init__(self) -> None:
            self.l1 = nnx_layer(nnx.Linear, params["l1"])
            self.l2 = nnx_layer(nnx.Linear, params["l2"])

        def features(self, x: jax.Array) -> jax.Array:
            return jax.nn.relu(self.l1(x))

        def head(self, h_: jax.Array) -> jax.Array:
            return self.l2(h_)  # type: ignore[no-any-return]

    return Layers()


def haiku_mlp_features(x: jax.Array) -> jax.Array:
    import haiku as hk

    return jax.nn.relu(hk.Linear(D_HIDDEN, name="l1")(x))


def haiku_mlp_head(h_: jax.Array) -> jax.Array:
    import haiku as hk

    return hk.Linear(D_OUT, name="l2")(h_)


def equinox_mlp(params: Params) -> Any:
    import equinox as eqx

    class Layers(eqx.Module):
        l1: eqx.nn.Linear
        l2: eqx.nn.Linear

        def features(self, x: jax.Array) -> jax.Array:
            return jax.nn.relu(self.l1(x))

        def head(self, h_: jax.Array) -> jax.Array:
            return self.l2(h_)

    return Layers(equinox_linear(params["l1"]), equinox_linear(params["l2"]))


MLP = Model(
    name="MLP",
    suffix="",
    hidden=D_HIDDEN,
    initial_params=mlp_params,
    make_batches=mlp_batches,
    features=lambda p, x: jax.nn.relu(dense(x, p["l1"])),
    head=lambda p, h_: dense(h_, p["l2"]),
    loss=mse,
    nnx_layers=nnx_mlp,
    haiku_features=haiku_mlp_features,
    haiku_head=haiku_mlp_head,
    equinox_layers=equinox_mlp,
)


# --- the CNN -------------------------------------------------------------------------

SIDE, CLASSES, C1, C2, CNN_HIDDEN, CNN_BATCH = 28, 10, 16, 32, 128, 32
FLAT = (SIDE // 4) ** 2 * C2  # after two 2x2 poolings


def cnn_params() -> Params:
    rng = np.random.default_rng(2)
    return {
        "conv1": {"w": _normal(rng, (3, 3, 1, C1), 9), "b": _bias(rng, C1)},
        "conv2": {"w": _normal(rng, (3, 3, C1, C2), 9 * C1), "b": _bias(rng, C2)},
        "linear1": {"w": _normal(rng, (FLAT, CNN_HIDDEN), FLAT), "b": _bias(rng, CNN_HIDDEN)},
        "linear2": {
            "w": _normal(rng, (CNN_HIDDEN, CLASSES), CNN_HIDDEN),
            "b": jnp.zeros((CLASSES,), jnp.float32),
        },
    }


def cnn_batches(n: int) -> Batches:
    """Pixels in [0, 1); the label is the argmax of a fixed random projection."""
    rng = np.random.default_rng(3)
    projection = rng.normal(size=(SIDE * SIDE, CLASSES))
    out = []
    for _ in range(n):
        x = rng.random(size=(CNN_BATCH, SIDE, SIDE, 1)).astype(np.float32)
        y = np.argmax(x.reshape(CNN_BATCH, -1) @ projection, axis=1).astype(np.int32)
        out.append((jnp.asarray(x), jnp.asarray(y)))
    return out


def cnn_features(p: Params, x: jax.Array) -> jax.Array:
    x = avg_pool(jax.nn.relu(conv(x, p["conv1"])))
    x = avg_pool(jax.nn.relu(conv(x, p["conv2"])))
    x = x.reshape(x.shape[0], -1)  # flatten
    return jax.nn.relu(dense(x, p["linear1"]))


def nnx_cnn(params: Params) -> Any:
    from flax import nnx

    class Layers(nnx.Module):
        def __init__(self) -> None:
            self.conv1 = nnx_layer(nnx.Conv, params["conv1"], kernel_size=(3, 3))
            self.conv2 = nnx_layer(nnx.Conv, params["conv2"], kernel_size=(3, 3))
            self.linear1 = nnx_layer(nnx.Linear, params["linear1"])
            self.linear2 = nnx_layer(nnx.Linear, params["linear2"])

        def features(self, x: jax.Array) -> jax.Array:
            pool = {"window_shape": (2, 2), "strides": (2, 2)}
            x = nnx.avg_pool(nnx.relu(self.conv1(x)), **pool)  # type: ignore[no-untyped-call]
            x = nnx.avg_pool(nnx.relu(self.conv2(x)), **pool)  # type: ignore[no-untyped-call]
            x = x.reshape(x.shape[0], -1)  # flatten
            return nnx.relu(self.linear1(x))

        def head(self, h_: jax.Array) -> jax.Array:
            return self.linear2(h_)  # type: ignore[no-any-return]

    return Layers()


def haiku_cnn_features(x: jax.Array) -> jax.Array:
    import haiku as hk

    x = jax.nn.relu(hk.Conv2D(C1, kernel_shape=3, padding="SAME", name="conv1")(x))
    x = hk.avg_pool(x, window_shape=2, strides=2, padding="VALID")
    x = jax.nn.relu(hk.Conv2D(C2, kernel_shape=3, padding="SAME", name="conv2")(x))
    x = hk.avg_pool(x, window_shape=2, strides=2, padding="VALID")
    x = hk.Flatten()(x)
    return jax.nn.relu(hk.Linear(CNN_HIDDEN, name="linear1")(x))


def haiku_cnn_head(h_: jax.Array) -> jax.Array:
    import haiku as hk

    return hk.Linear(CLASSES, name="linear2")(h_)


def equinox_cnn(params: Params) -> Any:
    import equinox as eqx

    class Layers(eqx.Module):
        conv1: eqx.nn.Conv2d
        conv2: eqx.nn.Conv2d
        pool: eqx.nn.AvgPool2d
        linear1: eqx.nn.Linear
        linear2: eqx.nn.Linear

        def features(self, x: jax.Array) -> jax.Array:
            x = jnp.moveaxis(x, -1, 0)  # the batches are NHWC, Equinox is channel-first
            x = self.pool(jax.nn.relu(self.conv1(x)))
            x = self.pool(jax.nn.relu(self.conv2(x)))
            x = jnp.moveaxis(x, 0, -1).reshape(-1)  # flatten in the canonical (HWC) order
            return jax.nn.relu(self.linear1(x))

        def head(self, h_: jax.Array) -> jax.Array:
            return self.linear2(h_)

    return Layers(
        equinox_conv(params["conv1"]),
        equinox_conv(params["conv2"]),
        eqx.nn.AvgPool2d(2, stride=2),
        equinox_linear(params["linear1"]),
        equinox_linear(params["linear2"]),
    )


CNN = Model(
    name="CNN",
    suffix=" [CNN]",
    hidden=CNN_HIDDEN,
    initial_params=cnn_params,
    make_batches=cnn_batches,
    features=cnn_features,
    head=lambda p, h_: dense(h_, p["linear2"]),
    loss=cross_entropy,
    nnx_layers=nnx_cnn,
    haiku_features=haiku_cnn_features,
    haiku_head=haiku_cnn_head,
    equinox_layers=equinox_cnn,
)

MODELS = {m.name: m for m in (MLP, CNN)}

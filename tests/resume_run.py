"""A small training run, interrupted and resumed in fresh processes by
`test_training.py` (``python tests/resume_run.py first|rest PATH K N``).

Its state lives in handlers: parameters in a `State`, a typed-key dropout stream
and a raw-key (``uint32[2]``) noise stream. `first` trains K steps and saves
`effax.snapshot` with `np.savez`; `rest` restores it into fresh handlers and
trains to step N, saving its losses and final snapshot.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np

import effax as fx

params = fx.State[jax.Array]("params")
dropout = fx.RandomKey("dropout")  # seeded with an int: typed keys
noise = fx.RandomKey("noise")  # seeded with jax.random.PRNGKey: raw uint32[2] keys
loss_log = fx.Emit[jax.Array]("loss")


@fx.jit
def step(x):
    def loss(w):
        keep = jax.random.bernoulli(dropout.next_key(), 0.8, x.shape)
        return jnp.mean((jnp.where(keep, x, 0.0) @ w - 1.0) ** 2)

    value, grad = jax.value_and_grad(loss)(params.get())
    jitter = 1e-3 * jax.random.normal(noise.next_key(), grad.shape)
    params.set(params.get() - 0.1 * grad + jitter)
    loss_log.emit(value)


def fresh():
    return fx.handlers(
        params.init(jnp.ones(3)),
        dropout.seed(0),
        noise.seed(jax.random.PRNGKey(1)),
        loss_log.collect(),
    )


def train(hs, steps):
    x = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)
    with hs:
        for _ in range(steps):
            step(x)
    return np.stack([np.asarray(v) for v in hs[loss_log]]) if steps else np.zeros((0,))


def save(path, tree):
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    np.savez(path, **{jax.tree_util.keystr(k): np.asarray(v) for k, v in flat})


def load(path, like):
    """`like`'s structure, with the arrays saved at `path`."""
    data = np.load(path)
    paths, treedef = jax.tree_util.tree_flatten_with_path(like)
    return jax.tree.unflatten(treedef, [data[jax.tree_util.keystr(k)] for k, _ in paths])


def main(mode, path, k, n):
    hs = fresh()
    if mode == "first":
        train(hs, k)
        save(path, fx.snapshot(hs))
    else:
        fx.restore(load(path, fx.snapshot(hs)), hs)
        losses = train(hs, n - k)
        save(path + ".final", {"losses": losses, "state": fx.snapshot(hs)})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))

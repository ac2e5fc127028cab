"""Interpretability on a small transformer with `effax.Tap`: the model is written
once, with named tap sites; recording, activation patching and gradient attribution
are handlers installed by the caller.

The model is a 3-layer language model (token and learned position embeddings,
pre-LayerNorm blocks of 4-head causal self-attention and an MLP, a residual stream
of width 32). Its blocks' parameters are stacked along a leading layer axis and run
by ``effax.scan`` over layers, each block under ``effax.checkpoint`` (remat). It is
trained with optax, in an ``effax.jit`` step, on a synthetic corpus made here: every
sum ``a b =`` modulo 23, the next token being ``(a + b) % 23``.

The block taps three sites: ``resid_pre`` (the residual stream going in),
``attn/head_out`` (each head's output, shape ``(heads, tokens, head width)``) and
``resid_post`` (the residual stream coming out). Then, with handlers only:

(a) **recording**: ``acts.record("resid_*", "attn/head_out")`` gives the residual
    stream and the heads' outputs at every layer, stacked in layer order, from the
    compiled forward pass;
(b) **activation patching**: the clean prompt ``3 5 =`` (answer 8) and the
    corrupted prompt ``11 5 =`` (answer 16). For each (layer, head), the corrupted
    run is repeated with that one head's output replaced by the clean run's, the
    layers after it recomputed, and the logit difference ``logit[8] - logit[16]``
    read at the last position (``acts.replace(..., where=mask)``);
(c) **gradient x activation attribution**: ``acts.gradients("resid_post")`` under
    ``effax.grad`` of the clean logit difference, times the recorded ``resid_post``,
    summed per layer.

The same analyses are then written **by hand** in plain JAX: the scan threads the
patch (layer, head, value) and a perturbation per layer in as arguments and brings
the recorded values out as outputs, and ``jax.grad`` differentiates with respect to
the perturbations. Both give the same numbers; ``main`` prints them with the lines
of code of each version. Last, the blocks as **Flax NNX** modules (layers in a Python
loop): their ``__call__`` taps the same sites, the step is compiled with
``effax.handle(step, transform=nnx.jit)``, the same analysis code runs on it, and
what it records and patches is compared with NNX's own way
(``self.sow(nnx.Intermediate, ...)`` under ``nnx.capture``, and a patch passed down
as an argument).

Run: python examples/interpretability.py [--quick] [--steps N] [--out DIR]
"""

from __future__ import annotations

import argparse
import pathlib
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from _porting import lines_of_code
from flax import nnx

import effax as fx

Params = dict[str, Any]

P = 23  # the modulus: tokens 0..P-1 are numbers, token P is "="
V = P + 1  # vocabulary
T = 3  # tokens per prompt: a b =
D = 32  # residual stream width
H = 4  # attention heads
DH = D // H  # head width
L = 3  # layers
F = 4 * D  # MLP width
CAUSAL = np.tril(np.ones((T, T), bool))

# the prompts of the patching experiment: only the first number differs
CLEAN, CORRUPTED = (3, 5), (11, 5)
ANSWER, DISTRACTOR = sum(CLEAN) % P, sum(CORRUPTED) % P

acts = fx.Tap[jax.Array]("acts")

# --- the task and the model's layers (shared by every version) ----------------------


def make_corpus() -> tuple[np.ndarray, np.ndarray]:
    """Every prompt ``a b =`` (shape (P*P, T)) and its next token ``(a + b) % P``."""
    a, b = (x.ravel() for x in np.meshgrid(np.arange(P), np.arange(P), indexing="ij"))
    tokens = np.stack([a, b, np.full_like(a, P)], axis=1).astype(np.int32)
    return tokens, ((a + b) % P).astype(np.int32)


def prompt(numbers: tuple[int, int]) -> jax.Array:
    return jnp.asarray([*numbers, P], jnp.int32)


def patch_mask(layer: int, head: int) -> np.ndarray:
    """(L, H, 1, 1): True at the one head patched."""
    here = np.zeros((L, H, 1, 1), bool)
    here[layer, head] = True
    return here


def init_params(seed: int) -> Params:
    """Random parameters, drawn with NumPy (no small programs to compile); the blocks'
    are stacked along a leading layer axis."""
    rng = np.random.default_rng(seed)

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32) * shape[-2] ** -0.5

    blocks = {
        "ln1_scale": np.ones((L, D), np.float32),
        "ln1_bias": np.zeros((L, D), np.float32),
        "w_qkv": normal(L, 3, H, D, DH),
        "w_o": normal(L, H, DH, D),
        "ln2_scale": np.ones((L, D), np.float32),
        "ln2_bias": np.zeros((L, D), np.float32),
        "w_in": normal(L, D, F),
        "b_in": np.zeros((L, F), np.float32),
        "w_out": normal(L, F, D),
        "b_out": np.zeros((L, D), np.float32),
    }
    params = {
        "embed": normal(V, D) * D**0.5,
        "pos": normal(T, D) * 0.1,
        "blocks": blocks,
        "ln_f_scale": np.ones(D, np.float32),
        "ln_f_bias": np.zeros(D, np.float32),
        "unembed": normal(D, V),
    }
    return jax.tree.map(jnp.asarray, params)


def layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array) -> jax.Array:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * scale[None] + bias[None]


def attention_heads(x: jax.Array, w: Params) -> jax.Array:
    """Each head's output (H, T, DH) of causal self-attention over `x` (T, D)."""
    q, k, v = jnp.einsum("td,chde->chte", x, w["w_qkv"])
    scores = jnp.einsum("hte,hse->hts", q, k) / np.sqrt(DH)
    scores = jnp.where(CAUSAL[None], scores, -1e9)
    return jnp.einsum("hts,hse->hte", jax.nn.softmax(scores, axis=-1), v)


def mix(x: jax.Array, heads: jax.Array, w: Params) -> jax.Array:
    """The rest of a block: the heads' outputs projected into the residual stream,
    then the MLP."""
    x = x + jnp.einsum("hte,hed->td", heads, w["w_o"])
    h = layer_norm(x, w["ln2_scale"], w["ln2_bias"]) @ w["w_in"] + w["b_in"][None]
    return x + jax.nn.gelu(h) @ w["w_out"] + w["b_out"][None]


def embed(params: Params, tokens: jax.Array) -> jax.Array:
    return params["embed"][tokens] + params["pos"]


def unembed(params: Params, x: jax.Array) -> jax.Array:
    return layer_norm(x, params["ln_f_scale"], params["ln_f_bias"]) @ params["unembed"]


def difference(logits: jax.Array, answer: int, distractor: int) -> jax.Array:
    """The logit difference at the last position: answer minus distractor."""
    return logits[-1, answer] - logits[-1, distractor]


# --- taps: the model -----------------------------------------------------------------


def block(x: jax.Array, w: Params) -> jax.Array:
    x = acts.tap("resid_pre", x)
    heads = attention_heads(layer_norm(x, w["ln1_scale"], w["ln1_bias"]), w)
    heads = acts.tap("attn/head_out", heads)
    return acts.tap("resid_post", mix(x, heads, w))


def transformer(params: Params, tokens: jax.Array) -> jax.Array:
    """The logits (T, V) of one prompt: the blocks run by effax.scan over layers."""
    body = fx.checkpoint(lambda x, w: (block(x, w), None))
    x, _ = fx.scan(body, embed(params, tokens), params["blocks"])
    return unembed(params, x)


# --- taps: the analyses --------------------------------------------------------------


def logit_diff(params: Params, tokens: jax.Array) -> jax.Array:
    return difference(transformer(params, tokens), ANSWER, DISTRACTOR)


run = fx.jit(logit_diff)
gradients = fx.jit(fx.grad(logit_diff))  # and the gradients the handlers ask for


# Patching one head must change that head at that layer only: the layers after it
# are recomputed from the patched stream. `acts.replace({site: rows}, where=...)`
# gives each tap of "attn/head_out" (one per layer) its row of the clean run's
# values, taken only where the mask is true (the one (layer, head) patched) and its
# own value elsewhere: exactly the hand-written `jnp.where` below. Rows and mask
# are traced inputs, so every (layer, head) runs one compiled program.


def taps_analyses(run: Any, model: Any, gradients: Any = None) -> dict[str, Any]:
    """Record, patch and attribute with handlers around `run(model, tokens)`."""
    out: dict[str, Any] = {}
    for name, numbers in (("clean", CLEAN), ("corrupted", CORRUPTED)):
        with acts.record("resid_*", "attn/head_out") as recorder:
            out[name] = float(run(model, prompt(numbers)))
        out[f"{name} sites"] = recorder.value
    out["patched"] = np.zeros((L, H))
    for layer, head in np.ndindex(L, H):
        clean = {"attn/head_out": out["clean sites"]["attn/head_out"]}
        with acts.replace(clean, where={"attn/head_out": patch_mask(layer, head)}):
            out["patched"][layer, head] = run(model, prompt(CORRUPTED))
    if gradients is not None:
        with acts.gradients("resid_post") as grads:
            gradients(model, prompt(CLEAN))
        activation = out["clean sites"]["resid_post"]
        out["attribution"] = np.sum(grads.value["resid_post"] * activation, axis=(1, 2))
    return out


# --- by hand: the model --------------------------------------------------------------


def hand_block(x: jax.Array, inputs: Any, patch: Any) -> tuple[jax.Array, dict[str, jax.Array]]:
    w, layer, eps = inputs  # this layer's weights, its index, its perturbation
    patch_layer, patch_head, patch_value = patch
    heads = attention_heads(layer_norm(x, w["ln1_scale"], w["ln1_bias"]), w)
    here = (layer == patch_layer) & (jnp.arange(H)[:, None, None] == patch_head)
    heads = jnp.where(here, patch_value, heads)
    out = mix(x, heads, w) + eps
    return out, {"resid_pre": x, "attn/head_out": heads, "resid_post": out}


def hand_transformer(params: Params, tokens: jax.Array, patch: Any, eps: jax.Array) -> Any:
    """The logits, and each layer's recorded values as scan outputs."""
    body = jax.checkpoint(lambda x, inputs: hand_block(x, inputs, patch))
    inputs = (params["blocks"], jnp.arange(L), eps)
    x, recorded = jax.lax.scan(body, embed(params, tokens), inputs)
    return unembed(params, x), recorded


# --- by hand: the analyses -----------------------------------------------------------


def hand_logit_diff(params: Params, tokens: jax.Array, patch: Any, eps: jax.Array) -> Any:
    logits, recorded = hand_transformer(params, tokens, patch, eps)
    return difference(logits, ANSWER, DISTRACTOR), recorded


hand_run = jax.jit(hand_logit_diff)
hand_gradients = jax.jit(jax.grad(hand_logit_diff, argnums=3, has_aux=True))


def hand_analyses(params: Params) -> dict[str, Any]:
    no_patch = (jnp.int32(-1), jnp.int32(0), jnp.zeros((H, T, DH)))
    no_eps = jnp.zeros((L, T, D))
    out: dict[str, Any] = {}
    for name, numbers in (("clean", CLEAN), ("corrupted", CORRUPTED)):
        ld, out[f"{name} sites"] = hand_run(params, prompt(numbers), no_patch, no_eps)
        out[name] = float(ld)
    out["patched"] = np.zeros((L, H))
    for layer, head in np.ndindex(L, H):
        value = out["clean sites"]["attn/head_out"][layer]
        patch = (jnp.int32(layer), jnp.int32(head), value)
        out["patched"][layer, head] = hand_run(params, prompt(CORRUPTED), patch, no_eps)[0]
    grads, _ = hand_gradients(params, prompt(CLEAN), no_patch, no_eps)
    out["attribution"] = np.sum(grads * out["clean sites"]["resid_post"], axis=(1, 2))
    return out


# --- Flax NNX: the trained model as modules (shared) ---------------------------------

SITES = ("resid_pre", "attn/head_out", "resid_post")


class Block(nnx.Module):
    """One block of the trained model as an NNX module (its call: below, two ways)."""

    def __init__(self, w: Params) -> None:
        self.names = tuple(w)
        for name, value in w.items():
            setattr(self, name, nnx.Param(value))

    def weights(self) -> Params:
        return {name: getattr(self, name)[...] for name in self.names}


class Transformer(nnx.Module):
    """The trained model as NNX modules. Its layers run in a Python loop: effax's
    handlers cross `effax.scan`, not `nnx.scan` (a `jax.lax.scan`), and a list of
    modules is NNX's plain way to hold them."""

    block: type[Block] = Block

    def __init__(self, params: Params) -> None:
        self.embed = nnx.Param(params["embed"])
        self.pos = nnx.Param(params["pos"])
        layers = [jax.tree.map(lambda a, i=i: a[i], params["blocks"]) for i in range(L)]
        self.blocks = nnx.List([self.block(w) for w in layers])
        self.ln_f_scale = nnx.Param(params["ln_f_scale"])
        self.ln_f_bias = nnx.Param(params["ln_f_bias"])
        self.unembed = nnx.Param(params["unembed"])

    def stream(self, tokens: jax.Array) -> jax.Array:
        return self.embed[...][tokens] + self.pos[...]

    def logits(self, x: jax.Array) -> jax.Array:
        return layer_norm(x, self.ln_f_scale[...], self.ln_f_bias[...]) @ self.unembed[...]


# --- Flax NNX: with taps ---------------------------------------------------------------


class TapBlock(Block):
    def __call__(self, x: jax.Array) -> jax.Array:
        w = self.weights()
        x = acts.tap("resid_pre", x)
        heads = attention_heads(layer_norm(x, w["ln1_scale"], w["ln1_bias"]), w)
        heads = acts.tap("attn/head_out", heads)
        return acts.tap("resid_post", mix(x, heads, w))


class TapTransformer(Transformer):
    block = TapBlock

    def __call__(self, tokens: jax.Array) -> jax.Array:
        x = self.stream(tokens)
        for block in self.blocks:
            x = block(x)
        return self.logits(x)


def nnx_logit_diff(model: TapTransformer, tokens: jax.Array) -> jax.Array:
    return difference(model(tokens), ANSWER, DISTRACTOR)


# nnx.jit plumbs the modules, effax the handlers around the call (record, replace):
# `taps_analyses(nnx_run, model)` runs the same analyses as on the plain JAX model
nnx_run = fx.handle(nnx_logit_diff, transform=nnx.jit)


# --- Flax NNX: NNX's own way (sow, a patch passed down) --------------------------------


class SowBlock(Block):
    def __call__(self, x: jax.Array, here: jax.Array, value: jax.Array) -> jax.Array:
        w = self.weights()
        self.sow(nnx.Intermediate, "resid_pre", x)
        heads = attention_heads(layer_norm(x, w["ln1_scale"], w["ln1_bias"]), w)
        heads = jnp.where(here, value, heads)
        self.sow(nnx.Intermediate, "attn/head_out", heads)
        x = mix(x, heads, w)
        self.sow(nnx.Intermediate, "resid_post", x)
        return x


class SowTransformer(Transformer):
    block = SowBlock

    def __call__(self, tokens: jax.Array, here: jax.Array, values: jax.Array) -> jax.Array:
        x = self.stream(tokens)
        for block, here_l, value_l in zip(self.blocks, here, values, strict=True):
            x = block(x, here_l, value_l)
        return self.logits(x)


def sow_logit_diff(model: SowTransformer, tokens: jax.Array, here: Any, values: Any) -> Any:
    return difference(model(tokens, here, values), ANSWER, DISTRACTOR)


@nnx.jit
def sow_run(model: SowTransformer, tokens: jax.Array, here: Any, values: Any) -> Any:
    captured: Any = nnx.capture(sow_logit_diff, nnx.Intermediate)
    ld, sown = captured(model, tokens, here, values)
    blocks = sown["blocks"]
    return ld, {site: jnp.stack([blocks[i][site][0] for i in range(L)]) for site in SITES}


def sow_analyses(model: SowTransformer) -> dict[str, Any]:
    nowhere = np.zeros((L, H, 1, 1), bool)
    ld, sites = sow_run(model, prompt(CLEAN), nowhere, jnp.zeros((L, H, T, DH)))
    out: dict[str, Any] = {"clean": float(ld), "clean sites": sites}
    out["patched"] = np.zeros((L, H))
    for layer, head in np.ndindex(L, H):
        here, values = patch_mask(layer, head), sites["attn/head_out"]
        out["patched"][layer, head] = sow_run(model, prompt(CORRUPTED), here, values)[0]
    return out


# --- training ------------------------------------------------------------------------

optimizer = optax.adam(3e-3)
traces: list[int] = []  # one entry per trace of the training step


def loss_fn(params: Params, tokens: Any, targets: Any) -> tuple[jax.Array, jax.Array]:
    logits = fx.vmap(transformer, in_axes=(None, 0))(params, tokens)[:, -1]
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()
    return loss, jnp.mean(logits.argmax(axis=-1) == targets)


@fx.jit
def train_step(params: Params, opt_state: Any, tokens: np.ndarray, targets: np.ndarray) -> Any:
    traces.append(1)
    (loss, accuracy), grads = fx.value_and_grad(loss_fn, has_aux=True)(params, tokens, targets)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, accuracy


def train(steps: int, seed: int) -> tuple[Params, list[float], float]:
    """The trained parameters, the losses, and the last step's accuracy."""
    tokens, targets = make_corpus()
    params = init_params(seed)
    opt_state = optimizer.init(params)
    losses = []
    with acts.ignore():  # taps off: the training step is the untapped program
        for _ in range(steps):
            params, opt_state, loss, accuracy = train_step(params, opt_state, tokens, targets)
            losses.append(loss)
    return params, [float(v) for v in losses], float(accuracy)


# --- the comparison ------------------------------------------------------------------


def max_abs(a: Any, b: Any) -> float:
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


def max_sites(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The largest difference between the sites two runs recorded on the clean prompt."""
    return max(max_abs(a["clean sites"][site], b["clean sites"][site]) for site in SITES)


def save_grid(grid: np.ndarray, clean: float, corrupted: float, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 3))
    image = ax.imshow(grid, cmap="RdBu", vmin=-abs(clean), vmax=abs(clean))
    ax.set(xlabel="head", ylabel="layer", xticks=range(H), yticks=range(L))
    ax.set_title(f"patched logit difference\n(clean {clean:.1f}, corrupted {corrupted:.1f})")
    fig.colorbar(image)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(
    steps: int | None = None,
    *,
    quick: bool = False,
    seed: int = 0,
    out: str | pathlib.Path | None = None,
) -> dict[str, Any]:
    """Train the model, run the analyses with taps, by hand and under NNX; print and
    return the figures. `out`, if given, is a folder for the patching heatmap."""
    steps = steps or (60 if quick else 400)
    start = time.perf_counter()
    params, losses, accuracy = train(steps, seed)
    print(
        f"{steps} steps on the {P * P} sums mod {P}: loss {losses[0]:.3f} -> {losses[-1]:.4f}, "
        f"accuracy {accuracy:.3f}; training step traced {len(traces)} time(s)"
    )
    taps, hand = taps_analyses(run, params, gradients), hand_analyses(params)
    nnx_taps = taps_analyses(nnx_run, TapTransformer(params))
    sow = sow_analyses(SowTransformer(params))

    sections = lines_of_code(__file__)
    lines = {
        name: sum(n for section, n in sections.items() if section.startswith(prefix))
        for name, prefix in (
            ("taps", "taps:"),
            ("hand", "by hand:"),
            ("nnx taps", "Flax NNX: with taps"),
            ("nnx own", "Flax NNX: NNX's own"),
        )
    }
    diffs = {
        "recorded (taps vs hand)": max_sites(taps, hand),
        "logit diffs (taps vs hand)": max_abs(
            [taps["clean"], taps["corrupted"]], [hand["clean"], hand["corrupted"]]
        ),
        "patched (taps vs hand)": max_abs(taps["patched"], hand["patched"]),
        "attribution (taps vs hand)": max_abs(taps["attribution"], hand["attribution"]),
        "recorded (effax vs sow, NNX)": max_sites(nnx_taps, sow),
        "patched (effax vs by hand, NNX)": max_abs(nnx_taps["patched"], sow["patched"]),
        "recorded (NNX vs plain JAX)": max_sites(nnx_taps, taps),
    }

    print(
        f"\nclean prompt {CLEAN[0]} {CLEAN[1]} = (answer {ANSWER}), corrupted "
        f"{CORRUPTED[0]} {CORRUPTED[1]} = (answer {DISTRACTOR}); logit[{ANSWER}] - "
        f"logit[{DISTRACTOR}] at the last position:"
    )
    print(f"{'':26}{'taps':>10}{'by hand':>10}")
    for name in ("clean", "corrupted"):
        print(f"{name:26}{taps[name]:10.4f}{hand[name]:10.4f}")
    for layer, head in np.ndindex(L, H):
        row = f"patched layer {layer} head {head}"
        print(f"{row:26}{taps['patched'][layer, head]:10.4f}{hand['patched'][layer, head]:10.4f}")
    # At the last layer gradient x activation is ~0: the final LayerNorm makes the
    # logits (nearly) blind to the scale of the stream, so grad . x vanishes.
    print("gradient x activation, resid_post (~0 at the last layer: LayerNorm follows):")
    for layer in range(L):
        row = f"  layer {layer}"
        print(f"{row:26}{taps['attribution'][layer]:10.4f}{hand['attribution'][layer]:10.4f}")
    print(f"{'lines (model + analyses)':26}{lines['taps']:10d}{lines['hand']:10d}")
    print(
        f"Flax NNX lines: with taps {lines['nnx taps']} (taps_analyses reused), "
        f"NNX's own way {lines['nnx own']}"
    )
    print("max |difference|:")
    for name, value in diffs.items():
        print(f"  {name:34}{value:.3g}")
    seconds = time.perf_counter() - start
    print(f"{seconds:.1f} s in all")

    result: dict[str, Any] = {
        "params": params,
        "losses": losses,
        "accuracy": accuracy,
        "traces": len(traces),
        "taps": taps,
        "hand": hand,
        "nnx_taps": nnx_taps,
        "nnx_sow": sow,
        "lines": lines,
        "max_abs_diff": diffs,
        "seconds": seconds,
    }
    if out is not None:
        folder = pathlib.Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        result["png"] = folder / "interpretability.png"
        save_grid(taps["patched"], taps["clean"], taps["corrupted"], result["png"])
        print(f"patching heatmap saved to {result['png']}")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a short run (60 steps)")
    parser.add_argument("--steps", type=int, default=None, help="training steps")
    parser.add_argument("--out", default="examples/out", help="folder for the heatmap")
    args = parser.parse_args()
    main(args.steps, quick=args.quick, out=args.out)

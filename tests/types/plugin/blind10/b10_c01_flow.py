"""A small normalising flow (affine couplings) whose layers track their log-determinant."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx
from b10lib.effects import eps, init_key, noise, step_count, verbose
from b10lib.layers import dense, dense_init, jitter, tick

log_det = fx.State[jax.Array]("log_det")
hidden_sizes = fx.Ask[list[int]]("hidden_sizes", static=True)
nll_sum = fx.State[float]("nll_sum")

with init_key.seed(0):
    FLOW = [dense_init(2, 4) for _ in range(3)]
X = jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)


@fx.uses(log_det)
def coupling(p: dict[str, jax.Array], x: jax.Array, flip: bool) -> jax.Array:
    a, b = (x[..., 2:], x[..., :2]) if flip else (x[..., :2], x[..., 2:])
    st = dense(p, a)
    s, t = jnp.tanh(st[..., :2]), st[..., 2:]
    log_det.modify(lambda v: v + jnp.sum(s))
    y = b * jnp.exp(s) + t
    return jnp.concatenate([y, a], axis=-1) if flip else jnp.concatenate([a, y], axis=-1)


@fx.uses(log_det)
def flow_forward(x: jax.Array) -> jax.Array:
    for i, p in enumerate(FLOW):
        x = coupling(p, x, i % 2 == 1)
    return x


@fx.uses(log_det)
def neg_log_likelihood(x: jax.Array) -> jax.Array:
    z = flow_forward(x)
    base = 0.5 * jnp.sum(z**2) + 0.5 * z.size * jnp.log(2 * jnp.pi)
    return base - log_det.get()


# case: forward pass under a log-det cell
with log_det.init(jnp.float32(0)) as ld:
    z = flow_forward(X)
print(z.shape, ld.value)

# case: forward pass with no log-det handler at module level
z_bad = flow_forward(X)  # E: effax-unhandled

# case: the NLL through a handled function kept in a variable
nll_fn = fx.handle(neg_log_likelihood, log_det.init(jnp.float32(0)))
print(nll_fn(X))

# case: compiled NLL under a with
fast_nll = fx.jit(neg_log_likelihood)
with log_det.init(jnp.float32(0)):
    print(fast_nll(X))

# case: compiled NLL called at module level with nothing installed
fast_nll_2 = fx.jit(neg_log_likelihood)
fast_nll_2(X)  # E: effax-unhandled


# case: a dequantising forward pass that adds noise outside its row
@fx.uses(log_det)
def dequantised_forward(x: jax.Array) -> jax.Array:
    x = jitter(x, 0.05)  # E: effax-undeclared
    return flow_forward(x)


with log_det.init(jnp.float32(0)), noise.seed(1):
    dequantised_forward(X)


# case: the same with noise in the row
@fx.uses(log_det, noise)
def dequantised_ok(x: jax.Array) -> jax.Array:
    return flow_forward(jitter(x, 0.05))


with fx.handlers(log_det.init(jnp.float32(0)), noise.seed(1)) as hs:
    dequantised_ok(X)
print(hs[log_det], hs[noise].counter)


# case: training-step counter through a scan body with its own row
@fx.uses(log_det)
def scanned_nll(xs: jax.Array) -> jax.Array:
    @fx.uses(log_det, step_count)
    def body(c: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        tick()
        return c + neg_log_likelihood(x[None]), x

    total, _ = fx.scan(body, jnp.float32(0), xs)  # E: effax-undeclared
    return total  # E: no-any-return


with log_det.init(jnp.float32(0)), step_count.init(jnp.int32(0)):
    scanned_nll(X)


# case: scan over samples with the counter declared
@fx.uses(log_det, step_count)
def scanned_nll_ok(xs: jax.Array) -> jax.Array:
    def body(c: jax.Array, x: jax.Array) -> tuple[jax.Array, None]:
        tick()
        return c + neg_log_likelihood(x[None]), None

    return fx.scan(body, jnp.float32(0), xs)[0]  # E: no-any-return


with fx.handlers(log_det.init(jnp.float32(0)), step_count.init(jnp.int32(0))) as hs:
    print(fx.jit(scanned_nll_ok)(X), hs[step_count])


# case: a stabilised log that asks eps without listing it, no eps handler anywhere
@fx.uses(log_det)
def stable_nll(x: jax.Array) -> jax.Array:
    return neg_log_likelihood(x) + eps.ask()  # E: effax-undeclared


with log_det.init(jnp.float32(0)):
    stable_nll(X)


# case: the same, with a caller providing eps
@fx.uses(log_det)
def stable_nll_2(x: jax.Array) -> jax.Array:
    return jnp.log(jnp.abs(neg_log_likelihood(x)) + eps.ask())  # E: effax-undeclared


with log_det.init(jnp.float32(0)), eps.provide(1e-3):
    stable_nll_2(X)


# case: eps listed in the row, default answers with no handler
@fx.uses(log_det, eps)
def stable_nll_ok(x: jax.Array) -> jax.Array:
    return jnp.log(jnp.abs(neg_log_likelihood(x)) + eps.ask())


with log_det.init(jnp.float32(0)):
    stable_nll_ok(X)
print(eps.ask(), stable_nll_ok.__name__)


# case: hidden sizes given as a list to a static Ask
@fx.uses(hidden_sizes)
def width() -> int:
    return sum(hidden_sizes.ask())


with hidden_sizes.provide([4, 4]):  # E: effax-handler-type
    print(fx.jit(width)())


# case: hidden sizes given as a tuple
sizes_t = fx.Ask[tuple[int, ...]]("sizes_t", static=True)


@fx.uses(sizes_t)
def width_t() -> int:
    return sum(sizes_t.ask())


with sizes_t.provide((4, 4)):
    print(width_t())


# case: a float accumulator started from an int and updated in a compiled call
@fx.uses(nll_sum, log_det)
def accumulate(x: jax.Array) -> None:
    nll_sum.modify(lambda v: v + neg_log_likelihood(x))  # pyright: ignore[reportArgumentType]  # E: arg-type, return-value


with nll_sum.init(0), log_det.init(jnp.float32(0)):  # E: effax-handler-type
    fx.jit(accumulate)(X)


# case: the float accumulator started from a float
with nll_sum.init(0.0) as acc, log_det.init(jnp.float32(0)):
    fx.jit(accumulate)(X)
print(acc.value)


# case: a verbose flag with a default, asked from a row that holds it
@fx.uses(verbose, log_det)
def chatty_forward(x: jax.Array) -> jax.Array:
    if verbose.ask():
        print("forward", x.shape)
    return flow_forward(x)


with log_det.init(jnp.float32(0)):
    chatty_forward(X)
with log_det.init(jnp.float32(0)), verbose.provide(True):
    chatty_forward(X)


# case: an undecorated helper called at module level
def plain_forward(x: jax.Array) -> jax.Array:
    return flow_forward(x)


plain_forward(X)  # limit: calls of functions without effax.uses are not checked

# case: a conditional callee: the noisy variant chosen by a flag, the noise stream missing
dequantise = True
with log_det.init(jnp.float32(0)):
    (dequantised_ok if dequantise else flow_forward)(X)  # E: effax-unhandled

# case: the same conditional callee under both effects
with log_det.init(jnp.float32(0)), noise.seed(2):
    (dequantised_ok if dequantise else flow_forward)(X)


# case: ranking samples by their NLL with sorted(key=...), under the cell
@fx.uses(log_det)
def sample_nll(x: jax.Array) -> float:
    return float(neg_log_likelihood(x[None]))


SAMPLES = [X[0], X[1], X[0] * 2]
with log_det.init(jnp.float32(0)):
    ranked = sorted(SAMPLES, key=sample_nll)
print(len(ranked))

# case: the same ranking at module level with no cell
ranked_bad = sorted(SAMPLES, key=sample_nll)  # E: effax-unhandled

# case: the inverse-temperature flow: a float sum started from an int, read only eagerly
with nll_sum.init(0):  # E: effax-handler-type
    nll_sum.modify(lambda v: v + 1.5)

# case: the flow vmapped over samples, one log-det row per sample
with log_det.init(jnp.zeros(2)) as ld2:
    fx.vmap(lambda x: flow_forward(x[None])[0], state="batched")(X)
print(ld2.value)

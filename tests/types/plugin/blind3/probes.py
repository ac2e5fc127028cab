"""Interpretability probes: taps, named state and interceptors."""

import fnmatch

import jax
import jax.numpy as jnp

import effax as fx
from fxlib import acts, bn, losses, temperature
from fxlib.ops import running_mean, scaled, tapped_layer

seen = fx.Tap[jax.Array]("seen")
log = fx.Emit[float]("log")
W1, W2 = jnp.eye(3) * 0.5, jnp.ones((3, 2))
X = jnp.linspace(0.0, 1.0, 3)

# case: an MLP tapping its hidden and output sites
@fx.uses(acts)
def mlp(x: jax.Array) -> jax.Array:
    h = acts.tap("mlp/hidden", jnp.tanh(x @ W1))
    return acts.tap("mlp/out", h @ W2)

# case: a block tapping a second family that it does not declare
@fx.uses(acts)
def block(x: jax.Array) -> jax.Array:
    y = seen.tap("block/in", x)  # E: effax-undeclared
    return mlp(y)

# case: recording inside the function handles the tap
@fx.uses()
def recorded(x: jax.Array) -> dict[str, jax.Array]:
    with acts.record("*/hidden") as rec:
        mlp(x)
    return rec.value

# case: ignoring taps inside a pure function
@fx.uses()
def untapped(x: jax.Array) -> jax.Array:
    with acts.ignore():
        return fx.jit(mlp)(x)

# case: a tap interceptor alone handles nothing
@fx.uses()
def prefixed_only(x: jax.Array) -> jax.Array:
    with fx.intercept(acts, tap=lambda outer, site, v: outer.tap(f"b0/{site}", v)):
        return mlp(x)  # E: effax-undeclared

# case: an interceptor inside a recorder forwards its taps
@fx.uses()
def prefixed(x: jax.Array) -> dict[str, jax.Array]:
    with acts.record() as rec, fx.intercept(acts, tap=lambda outer, site, v: outer.tap(f"b0/{site}", v)):
        mlp(x)
    return rec.value

# case: a replacement zeroes the hidden site
@fx.uses()
def ablated(x: jax.Array) -> jax.Array:
    with acts.replace({"mlp/hidden": jnp.zeros(3)}):
        return mlp(x)

# case: replacing with a function, the record handler ended earlier
@fx.uses()
def ablated_late(x: jax.Array) -> jax.Array:
    with acts.record():
        mlp(x)
    out = mlp(x)  # E: effax-undeclared
    with acts.replace(lambda site, v: jnp.zeros_like(v) if fnmatch.fnmatch(site, "*/out") else v):
        return mlp(out)

# case: gradients at sites under fx.grad
@fx.uses()
def site_grads(x: jax.Array) -> dict[str, jax.Array]:
    with acts.gradients("mlp/*") as g:
        fx.grad(lambda v: jnp.sum(mlp(v)))(x)
    return g.value

# case: a tapped layer from another module under a recorder only
@fx.uses()
def tapped_recorded(x: jax.Array) -> dict[str, jax.Array]:
    with acts.record() as rec:
        tapped_layer(x)  # E: effax-undeclared
    return rec.value

# case: two tap families handled together
@fx.uses(temperature)
def both_families(x: jax.Array) -> jax.Array:
    with fx.handlers(seen.record(), acts.ignore()):
        return seen.tap("in", mlp(scaled(x)))

# case: a StateDict entry created on first use inside the row
@fx.uses(bn)
def batch_norm(x: jax.Array) -> jax.Array:
    var = bn.get("var", init=lambda: jnp.ones(x.shape[-1]))
    bn.set("var", 0.9 * var + 0.1 * jnp.var(x, axis=0))
    return x / jnp.sqrt(var + 1e-5)

# case: reading an entry without init, the plugin does not know the entries
@fx.uses(bn)
def read_var() -> jax.Array:
    return bn.get("var")

# case: a StateDict used where only the tap is declared
@fx.uses(acts)
def tapped_norm(x: jax.Array) -> jax.Array:
    return acts.tap("norm", batch_norm(x))  # E: effax-undeclared

# case: an Emit interceptor halving what is logged
@fx.uses(log)
def halved(x: float) -> None:
    with fx.intercept(log, emit=lambda outer, v: outer.emit(0.5 * v)):
        log.emit(x)

# case: a temperature interceptor with no provider in the row
@fx.uses()
def hotter(x: jax.Array) -> jax.Array:
    with fx.intercept(temperature, ask=lambda outer: 2 * outer.ask()):
        return scaled(x)  # E: effax-undeclared

# case: a variable holding an interceptor installed inside a collector
@fx.uses()
def doubled_log() -> list[float]:
    double = fx.intercept(log, emit=lambda outer, v: outer.emit(2 * v))
    with fx.handlers(log.collect(), double) as hs:
        log.emit(1.0)
    return hs[log]

# case: a scan over rows whose body reads named state not in the row
@fx.uses(acts)
def scanned_norm(xs: jax.Array) -> jax.Array:
    return jnp.asarray(fx.scan(lambda c, x: (c + acts.tap("x", batch_norm(x)).sum(), None), jnp.float32(0), xs)[0])  # E: effax-undeclared

# case: module level: a recorder around the compiled MLP
with acts.record() as rec0:
    fx.jit(mlp)(X)
print(sorted(rec0.value))

# case: module level: the MLP run with no tap handler at all
y_plain = mlp(X)  # E: effax-unhandled

# case: module level: record a scan of taps
with acts.record("h") as rec1:
    fx.scan(lambda c, _: (acts.tap("h", jnp.tanh(c)), None), jnp.float32(0.5), None, length=3)
print(rec1.value["h"].shape)

# case: module level: a tap interceptor with nothing outside it
with fx.intercept(acts, tap=lambda outer, site, v: outer.tap(site, 2 * v)):
    mlp(X)  # E: effax-unhandled

# case: module level: a replacer installed, then the tap made after it closed
with acts.replace({"mlp/out": jnp.zeros(2)}):
    y_rep = mlp(X)
y_after = fx.jit(mlp)(X)  # E: effax-unhandled

# case: module level: named state under its cell, compiled
with bn.init() as bn_cell:
    for _ in range(2):
        fx.jit(batch_norm)(jnp.ones((4, 3)))
print(sorted(bn_cell.value), read_var.__name__)

# case: module level: a running mean with no StateDict cell
running_mean("layer0", jnp.ones((2, 3)))  # E: effax-unhandled

# case: module level: a StateDict read directly, nothing installed
first_var = bn.get("var", init=jnp.ones(3))  # E: effax-unhandled

# case: module level: the MLP under a recorder of the wrong tap family
with seen.record():
    mlp(X)  # E: effax-unhandled

# case: module level: probes called outside their handlers
halved(1.0)  # E: effax-unhandled
batch_norm(jnp.ones((2, 3)))  # E: effax-unhandled
print(doubled_log(), recorded(X))

if __name__ == "__main__":
    # case: main block drives the probe functions
    print(recorded(X), untapped(X), prefixed(X), ablated(X), site_grads(X))
    with temperature.provide(jnp.float32(1.0)): print(both_families(jnp.ones(3)))
    with log.collect() as logged: halved(2.0)
    print(logged.value, doubled_log())
    with bn.init({"var": jnp.ones(3)}): print(read_var())
    # case: main block drives block
    with fx.handlers(acts.record(), seen.record()): block(X)
    # case: main block drives prefixed_only
    with acts.record(): prefixed_only(X)
    # case: main block drives ablated_late
    with acts.record(): ablated_late(X)
    # case: main block drives tapped_recorded
    with fx.handlers(temperature.provide(jnp.float32(1.0)), acts.record()): tapped_recorded(jnp.ones(3))
    # case: main block drives tapped_norm
    with fx.handlers(acts.record(), bn.init()): tapped_norm(jnp.ones((2, 3)))
    # case: main block drives hotter
    with temperature.provide(jnp.float32(1.0)): hotter(jnp.ones(3))
    # case: main block drives scanned_norm
    with fx.handlers(acts.record(), bn.init({"var": jnp.ones(3)})): scanned_norm(jnp.ones((2, 4, 3)))

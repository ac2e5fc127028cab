"""An optax training loop whose parameters, keys and metrics live in handlers."""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax  # type: ignore[import-untyped]

import effax as fx
from fxlib import dropout, losses, lr, params, scale, steps, temperature
from fxlib.ops import drop, scaled

opt_state = fx.State[Any]("opt_state")
grad_norms = fx.Emit[jax.Array]("grad_norms")
optimizer = optax.sgd(0.1)

X = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)
Y = jnp.array([1.0, -1.0, 0.5, 0.0])

def init_params(key: jax.Array) -> dict[str, jax.Array]:
    k1, k2 = jax.random.split(key)
    return {"w": jax.random.normal(k1, (3,)), "b": jax.random.normal(k2, ())}

# case: a model reading params and dropout keys
@fx.uses(params, dropout)
def predict(x: jax.Array) -> jax.Array:
    p = params.get()
    return drop(x, 0.1) @ p["w"] + p["b"]

# case: a loss with params passed explicitly, dropout in the row
@fx.uses(dropout)
def loss_of(p: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    keep = jax.random.bernoulli(dropout.next_key(), 0.9, x.shape)
    pred = jnp.where(keep, x, 0.0) @ p["w"] + p["b"]
    return jnp.mean((pred - y) ** 2)

# case: a compiled optax step with every effect declared
@fx.jit
@fx.uses(params, opt_state, dropout, losses)
def train_step(x: jax.Array, y: jax.Array) -> jax.Array:
    value, grads = jax.value_and_grad(loss_of)(params.get(), x, y)
    updates, new_state = optimizer.update(grads, opt_state.get())
    params.set(optax.apply_updates(params.get(), updates))
    opt_state.set(new_state)
    losses.emit(value)
    return jnp.asarray(value)

# case: a step that emits gradient norms it does not declare
@fx.uses(params, dropout)
def sgd_step(x: jax.Array, y: jax.Array) -> None:
    value, grads = fx.value_and_grad(loss_of)(params.get(), x, y)
    grad_norms.emit(optax.global_norm(grads))  # E: effax-undeclared
    params.set(jax.tree.map(lambda w, g: w - 0.1 * g, params.get(), grads))

# case: fx.grad of a loss under a row without its key stream
@fx.uses(params)
def grads_only(x: jax.Array, y: jax.Array) -> dict[str, jax.Array]:
    return dict(fx.grad(loss_of)(params.get(), x, y))  # E: effax-undeclared

# case: fx.value_and_grad of a local lambda with the Ask in the row
@fx.uses(scale)
def quadratic(w: jax.Array) -> tuple[jax.Array, jax.Array]:
    return fx.value_and_grad(lambda v: scale.ask() * jnp.sum(v**2))(w)

# case: a learning rate with a default, read inside a lambda under jax.grad
@fx.uses(lr, temperature)
def annealed_step(w: jax.Array) -> jax.Array:
    g = jax.grad(lambda v: jnp.sum(scaled(v) ** 2))(w)
    return jnp.asarray(w - lr.ask() * g)

# case: annealed step called from a row that only lists lr
@fx.uses(lr)
def annealed_twice(w: jax.Array) -> jax.Array:
    return annealed_step(annealed_step(w))  # E: effax-undeclared

# case: a dataclass holding the run's cells, one step method with a row
@dataclasses.dataclass
class Run:
    params_cell: fx.StateCell[dict[str, jax.Array]]
    opt_cell: fx.StateCell[Any]
    key_cell: fx.KeyStream
    history: list[float] = dataclasses.field(default_factory=list)

    @classmethod
    def fresh(cls, seed: int) -> "Run":
        p = init_params(jax.random.key(seed))
        return cls(params.init(p), opt_state.init(optimizer.init(p)), dropout.seed(seed))

    @fx.uses()
    def fit(self, n: int) -> list[float]:
        with fx.handlers(self.params_cell, self.opt_cell, self.key_cell, losses.collect()) as hs:
            for _ in range(n):
                train_step(X, Y)
        self.history.extend(float(v) for v in hs[losses])
        return self.history

# case: a fit method that forgets the loss collector
@dataclasses.dataclass
class LeakyRun:
    run: Run

    @fx.uses()
    def fit(self) -> None:
        with fx.handlers(self.run.params_cell, self.run.opt_cell, self.run.key_cell):
            train_step(X, Y)  # limit: handlers held in attributes (self.run.*) are entered, but which effects they handle is not known

# case: fx.handle with the cells, called where only losses is collected
@fx.uses(losses)
def handled_fit(p: dict[str, jax.Array]) -> jax.Array:
    step = fx.handle(train_step, params.init(p), opt_state.init(optimizer.init(p)), dropout.seed(0))
    return step(X, Y)

# case: fx.handle that misses the optimizer state
@fx.uses(losses)
def half_handled_fit(p: dict[str, jax.Array]) -> jax.Array:
    step = fx.handle(train_step, params.init(p), dropout.seed(0))
    return step(X, Y)  # E: effax-undeclared

# case: a training loop under a pure entry point with fx.scan over steps
@fx.uses()
def scan_fit(p: dict[str, jax.Array]) -> jax.Array:
    with fx.handlers(params.init(p), opt_state.init(optimizer.init(p)), dropout.seed(1), losses.collect()) as hs:
        fx.scan(lambda c, _: (c, train_step(X, Y)), None, None, length=3)
    return jnp.stack(hs[losses])

# case: a scan of train steps with the collector missing
@fx.uses(params, opt_state, dropout)
def scan_no_collector() -> None:
    fx.scan(lambda c, _: (c, train_step(X, Y)), None, None, length=2)  # E: effax-undeclared

# case: counting steps in a fori_loop with the state in the row
@fx.uses(steps)
def count_steps(n: int) -> jax.Array:
    return jnp.asarray(fx.fori_loop(0, n, lambda i, c: c + steps.modify(lambda s: s + 1), jnp.int32(0)))

# case: an evaluator whose __call__ row omits the key stream of predict
class Evaluator:
    @fx.uses(params)
    def __call__(self, x: jax.Array) -> jax.Array:
        return predict(x)  # E: effax-undeclared

# case: module-level training run under every handler
p0 = init_params(jax.random.key(0))
with fx.handlers(params.init(p0), opt_state.init(optimizer.init(p0)), dropout.seed(0), losses.collect()) as run_hs:
    for _ in range(3):
        train_step(X, Y)
print("losses", [round(float(v), 3) for v in run_hs[losses]])

# case: a compiled step called after the with block ended
last_loss = train_step(X, Y)  # E: effax-unhandled

# case: predict called with params but no key stream
with params.init(p0):
    pred0 = predict(X)  # E: effax-unhandled

# case: the Run dataclass fits itself
print(Run.fresh(0).fit(2))

# case: module level: helpers run without their handlers
quadratic(jnp.ones(2))  # E: effax-unhandled
count_steps(3)  # E: effax-unhandled
print(sgd_update_default := float(jnp.sum(jnp.ones(2) * lr.ask())))

if __name__ == "__main__":
    # case: main block drives the steps under handlers
    with fx.handlers(params.init(p0), dropout.seed(0), grad_norms.collect()): sgd_step(X, Y)
    with fx.handlers(params.init(p0), dropout.seed(0)): grads_only(X, Y)
    with scale.provide(2.0): print(quadratic(jnp.ones(2)))
    with temperature.provide(jnp.float32(1.0)): print(annealed_step(jnp.ones(2)), annealed_twice(jnp.ones(2)))
    # case: main block drives the entry points and handled fits
    with losses.collect(): handled_fit(p0)
    with fx.handlers(losses.collect(), opt_state.init(optimizer.init(p0))): half_handled_fit(p0)
    print(scan_fit(p0))
    with fx.handlers(params.init(p0), opt_state.init(optimizer.init(p0)), dropout.seed(0), losses.collect()): scan_no_collector()
    with steps.init(jnp.int32(0)) as steps_cell: count_steps(4)
    print(steps_cell.value)
    # case: the leaky run fits without a collector
    LeakyRun(Run.fresh(1)).fit()
    # case: main block drives the evaluator
    with fx.handlers(params.init(p0), dropout.seed(0)): Evaluator()(X)

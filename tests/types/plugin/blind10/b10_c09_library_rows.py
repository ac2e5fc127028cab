"""A script driving the b10lib training module: imported rows, aliases, constructors and properties."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import b10lib.effects as E
import effax as fx
from b10lib.effects import TRAIN_ROW, dropout, init_key, losses, params, step_count, temperature
from b10lib.effects import lr as learning_rate
from b10lib.layers import Block, Linear, tick
from b10lib.train import compiled_step, fresh_params, mlp_loss, predict, sgd_step

XS = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)
YS = jnp.array([0.5, -0.5, 1.0, 0.0])


def make_cells(seed: int = 0) -> list[fx.Handler[object]]:  # pyright: ignore[reportInvalidTypeArguments]  # E: type-var
    return [
        params.init(fresh_params()),
        step_count.init(jnp.int32(0)),
        dropout.seed(seed),
        losses.collect(),
        learning_rate.provide(jnp.float32(0.1)),
    ]


# case: ten compiled steps under the full set of handlers
with fx.handlers(
    params.init(fresh_params()), step_count.init(jnp.int32(0)), dropout.seed(0),
    losses.collect(), learning_rate.provide(jnp.float32(0.1)),
) as hs:
    for _ in range(10):
        compiled_step(XS, YS)
print(hs[step_count], hs[losses][-1])

# case: the compiled step with the learning rate missing
with params.init(fresh_params()), step_count.init(jnp.int32(0)), dropout.seed(0), losses.collect():
    compiled_step(XS, YS)  # E: effax-unhandled

# case: the eager step through the module alias, training mode on
with fx.handlers(
    E.params.init(fresh_params()), E.step_count.init(jnp.int32(0)), E.dropout.seed(1),
    E.losses.discard(), E.lr.provide(jnp.float32(0.05)), E.training.provide(True),
):
    print(sgd_step(XS, YS))


# case: an epoch function whose row covers the step's row
@fx.uses(params, learning_rate, E.training, *TRAIN_ROW)
def epoch(n: int) -> jax.Array:
    return fx.scan(lambda c, _: (c + sgd_step(XS, YS), None), jnp.float32(0), None, length=n)[0]  # E: no-any-return


with fx.handlers(
    params.init(fresh_params()), step_count.init(jnp.int32(0)), dropout.seed(0),
    losses.collect(), learning_rate.provide(jnp.float32(0.1)),
) as hs:
    print(epoch(3), len(hs[losses]))


# case: an epoch function whose row forgets the learning rate
@fx.uses(params, E.training, *TRAIN_ROW)
def epoch_bad(n: int) -> jax.Array:
    return fx.scan(lambda c, _: (c + sgd_step(XS, YS), None), jnp.float32(0), None, length=n)[0]  # E: effax-undeclared, no-any-return


with fx.handlers(
    params.init(fresh_params()), step_count.init(jnp.int32(0)), dropout.seed(0),
    losses.collect(), learning_rate.provide(jnp.float32(0.1)),
):
    epoch_bad(2)

# case: prediction with no parameters installed
predict(XS)  # E: effax-unhandled

# case: prediction under a parameter cell
with params.init(fresh_params()):
    print(predict(XS).shape)

# case: constructing a layer with no init stream
Linear(3, 4)  # E: effax-unhandled

# case: a layer built under the init stream, its weight property read with and without a temperature
with init_key.seed(0):
    lin = Linear(3, 4)
with temperature.provide(jnp.float32(2.0)):
    print(lin.scaled_weight.shape)
print(lin(XS).shape)

# case: the temperature-scaled weight property read at module level, nothing installed
w_scaled = lin.scaled_weight  # E: effax-unhandled

# case: a block built and called in one expression, step counter missing
with init_key.seed(1), dropout.seed(1):
    Block(3)(XS)  # E: effax-unhandled

# case: a block built and called under everything it needs
with init_key.seed(1), dropout.seed(1), step_count.init(jnp.int32(0)) as sc:
    Block(3)(XS)
print(sc.value)

# case: a handler variable rebound before the with: it holds the later handler
h = learning_rate.provide(jnp.float32(0.1))
h = params.init(fresh_params())  # E: assignment
with h, step_count.init(jnp.int32(0)), dropout.seed(0), losses.collect():
    sgd_step(XS, YS)  # E: effax-unhandled

# case: a partly handled step: the cells given to handle, the rest around the call
partly = fx.handle(sgd_step, params.init(fresh_params()), step_count.init(jnp.int32(0)))
with learning_rate.provide(jnp.float32(0.1)), dropout.seed(0), losses.discard():
    partly(XS, YS)

# case: the partly handled step with only the learning rate around it
with learning_rate.provide(jnp.float32(0.1)):
    partly(XS, YS)  # E: effax-unhandled


# case: a counter that declares the shared training row but only counts
@fx.uses(*TRAIN_ROW)
def count_only() -> jax.Array:
    return tick()


with step_count.init(jnp.int32(0)):
    count_only()  # E: effax-unhandled


# case: a shared-row function that reads the parameters too
@fx.uses(*TRAIN_ROW)
def peek_params() -> jax.Array:
    tick()
    return params.get()["w"].sum()  # E: effax-undeclared


with step_count.init(jnp.int32(0)), dropout.seed(0), losses.discard(), params.init(fresh_params()):
    peek_params()

# case: fx.value_and_grad of the library loss kept in a variable
loss_and_grad = fx.value_and_grad(mlp_loss)
with dropout.seed(0):
    v, g = loss_and_grad(fresh_params(), XS, YS)
print(v, g["w"].shape)

# case: cells made by a helper, some of them spread into a bundle (no learning rate)
with fx.handlers(*make_cells()[:4]):
    compiled_step(XS, YS)  # limit: a spread of a sliced helper result is not listed

# case: all of the helper's cells spread into a handled function
cells = make_cells(3)
owned_step = fx.handle(sgd_step, *cells)
owned_step(XS, YS)
print(cells[1].value)

# case: the JAX gradient of the library loss through a lambda, under its stream
with dropout.seed(4):
    print(jax.grad(lambda p: mlp_loss(p, XS, YS))(fresh_params())["b"])


# case: a trainer class whose fit method runs the library's compiled step
class Trainer:
    def __init__(self, n: int) -> None:
        self.n = n

    @fx.uses(params, learning_rate, *TRAIN_ROW)
    def fit(self) -> jax.Array:
        return jnp.stack([compiled_step(XS, YS) for _ in range(self.n)])  # E: effax-undeclared

    @fx.uses(params, *TRAIN_ROW)
    def fit_fixed_lr(self) -> jax.Array:
        return self.fit()  # E: effax-undeclared

    @fx.uses(params, *TRAIN_ROW)
    def fit_with_lr(self, rate: float) -> jax.Array:
        with learning_rate.provide(jnp.float32(rate)):
            return self.fit()


with fx.handlers(*make_cells()) as hs:
    Trainer(2).fit()
    Trainer(1).fit_with_lr(0.01)
print(hs[step_count])

# case: fitting with a fixed learning rate hidden by the row
with fx.handlers(*make_cells()):
    Trainer(1).fit_fixed_lr()

# case: fitting at module level with nothing installed
Trainer(1).fit()  # E: effax-unhandled

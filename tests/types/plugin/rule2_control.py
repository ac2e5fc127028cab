"""Rule 2: control-flow wrappers pass their bodies' rows through."""

import jax

import effax as fx
from mylib import log, scaled, steps, temperature


@fx.uses(steps)
def step(carry: int, x: jax.Array) -> tuple[int, None]:
    steps.set(steps.get() + 1)
    return carry + 1, None


@fx.uses(steps)
def count_up(i: int, c: int) -> int:
    return c + steps.get()


@fx.uses(temperature)
def loss(x: jax.Array) -> jax.Array:
    return x * temperature.ask()


# case: effax.scan performs its body's row
@fx.uses()
def scan_outside() -> int:
    total, _ = fx.scan(step, 0, jax.numpy.arange(3.0))  # E: effax-undeclared: "effax.scan" performs effect "steps"
    return total


# case: effax.scan under the handler its body needs
@fx.uses()
def scan_inside() -> int:
    with steps.init(0):
        total, _ = fx.scan(step, 0, jax.numpy.arange(3.0))
    return total


# case: a lambda body counts where it is written
@fx.uses(steps)
def scan_lambda() -> float:
    total, _ = fx.scan(lambda c, x: (c + temperature.ask(), None), 0.0, None, length=3)  # E: effax-undeclared: Effect "temperature"
    return total


# case: a nested body counts at the wrapper
@fx.uses()
def scan_nested_body() -> float:
    def body(c: float, x: None) -> tuple[float, None]:
        log.emit(c)
        return c + 1.0, None

    with log.collect():
        fx.scan(body, 0.0, None, length=2)
    total, _ = fx.scan(body, 0.0, None, length=2)  # E: effax-undeclared: "effax.scan" performs effect "log"
    return total


# case: the other loops and branches
@fx.uses()
def other_wrappers(flag: jax.Array) -> None:
    fx.fori_loop(0, 3, count_up, 0)  # E: effax-undeclared: "effax.fori_loop"
    fx.while_loop(lambda c: c < 3, lambda c: step(c, jax.numpy.zeros(()))[0], 0)  # E: effax-undeclared: "step" performs effect "steps"
    fx.cond(flag, loss, lambda x: x, jax.numpy.ones(()))  # E: effax-undeclared: "effax.cond" performs effect "temperature"
    fx.switch(0, [loss, loss], jax.numpy.ones(()))  # E: effax-undeclared: "effax.switch"
    fx.switch(0, [lambda x: x * temperature.ask()], jax.numpy.ones(()))  # E: effax-undeclared: "temperature"
    fx.map(loss, jax.numpy.ones(3))  # E: effax-undeclared: "effax.map"


# case: transformations return functions with their argument's row
@fx.uses()
def transformations(x: jax.Array) -> jax.Array:
    g = fx.grad(loss)
    g(x)  # E: effax-undeclared: "g" performs effect "temperature"
    fx.value_and_grad(loss)(x)  # E: effax-undeclared: "effax.value_and_grad(...)"
    fx.vmap(loss)(x)  # E: effax-undeclared: "effax.vmap(...)"
    return fx.checkpoint(loss)(x)  # E: effax-undeclared: "effax.checkpoint(...)"


# case: transformations under the handlers they need
@fx.uses()
def transformations_handled(x: jax.Array) -> jax.Array:
    g = fx.grad(loss)
    with temperature.provide(2.0):
        g(x)
        return fx.vmap(loss)(x) + fx.checkpoint(loss)(x) + scaled(1.0)

"""Values handed to handlers: what each effect can carry across jax.jit."""

import dataclasses

import jax
import jax.numpy as jnp

import effax as fx
from fxlib import Config, config, depth, mode, scale, steps, temperature, total
from fxlib.ops import scaled

levels = fx.Ask[list[int]]("levels", static=True)
table = fx.Ask[dict[str, int]]("table", static=True)
tags = fx.Ask[set[str]]("tags", static=True)
shape = fx.Ask[tuple[int, ...]]("shape", static=True)
label = fx.Ask[str]("label")
phase = fx.State[str]("phase")
count = fx.State[int]("count")
momentum = fx.State[float]("momentum")

@dataclasses.dataclass
class Opts:
    width: int = 2

opts = fx.Ask[Opts]("opts", static=True)

# case: static Asks given unhashable values
levels.provide([1, 2])  # E: effax-handler-type
table.provide({"a": 1})  # E: effax-handler-type
tags.provide({"x"})  # E: effax-handler-type

# case: a static Ask given a mutable (unhashable) dataclass
opts.provide(Opts())  # E: effax-handler-type

# case: static Asks given hashable values: a tuple, a frozen dataclass, str and int
with fx.handlers(shape.provide((2, 3)), config.provide(Config(width=8)), mode.provide("eval"), depth.provide(3)):
    print(shape.ask(), config.ask().width, mode.ask(), depth.ask())

# case: a float State started from an int, directly and inside fx.handlers
total.init(0)  # E: effax-handler-type
with fx.handlers(momentum.init(1), steps.init(jnp.int32(0))):  # E: effax-handler-type
    pass

# case: a float State given to fx.handle, started from an int
bump = fx.handle(lambda: momentum.set(momentum.get() * 0.9), momentum.init(1))  # E: effax-handler-type

# case: float and int States started from matching values
with fx.handlers(total.init(0.0), count.init(0), momentum.init(0.5)) as hs_ok:
    total.set(total.get() + 1.5)
    count.set(count.get() + 1)
print(hs_ok[total], hs_ok[count])

# case: a traced Ask and a State holding strings, which cannot cross jax.jit
label.provide("run-1")  # (reported before issue 28; an Ask[str] given a str now only where a compiled call performs it)
phase.init("warmup")  # (reported before issue 42; a State[str] given a str now only where a compiled call performs it)

# case: a traced float Ask given a Python int, and a scale given a float
with scale.provide(2), temperature.provide(jnp.float32(1.0)):
    print(scale.ask() * scaled(jnp.ones(2)))

# case: values of the wrong type for the effect
temperature.provide("hot")  # pyright: ignore[reportArgumentType]  # E: arg-type
steps.init("zero")  # pyright: ignore[reportArgumentType]  # E: arg-type
scale.provide(None)  # pyright: ignore[reportArgumentType]  # E: arg-type

# case: an asked value assigned to a variable of the wrong type
with scale.provide(1.5):
    as_text: str = scale.ask()  # pyright: ignore[reportAssignmentType]  # E: assignment

# case: a mode compared and used, correct at module level under its handler
with mode.provide("train"):
    training_mode = mode.ask() == "train"

# case: a function making handlers for its caller, static value unhashable
@fx.uses()
def make_levels(n: int) -> fx.Provider[list[int]]:
    return levels.provide(list(range(n)))  # E: effax-handler-type

# case: a function making a float State cell from a float
@fx.uses()
def make_momentum(beta: float) -> fx.StateCell[float]:
    return momentum.init(beta)

# case: a handled lambda given a float cell started from an int
@fx.uses()
def decayed() -> None:
    fx.handle(lambda: momentum.modify(lambda m: m * 0.5), momentum.init(3))()  # E: effax-handler-type

# case: an unhashable static value inside a handler bundle
with fx.handlers(levels.provide([1]), mode.provide("a")):  # E: effax-handler-type
    print(mode.ask())

if __name__ == "__main__":
    # case: main block uses the hashable static values
    with fx.handlers(shape.provide((4,)), make_momentum(0.9)) as hs_main: print(jnp.zeros(shape.ask()), hs_main[momentum])
    # case: main block asks for levels made by the helper
    with make_levels(3): print(levels.ask())
    # case: main block runs the decayed helper
    decayed()

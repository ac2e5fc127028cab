"""A library module: effects declared here, used from the corpus files.

A helper of the corpus, not a case file: mypy must report nothing here.
"""

from typing import Final

import effax as fx

temperature = fx.Ask[float]("temperature")
config = fx.Ask[tuple[int, str]]("config", static=True)
steps = fx.State[int]("steps")
dropout = fx.RandomKey("dropout")
log = fx.Emit[float]("log")

t2 = temperature  # a module-level alias: the same effect


@fx.uses(temperature)
def scaled(x: float) -> float:
    return x * temperature.ask()


@fx.uses(temperature, fx.rng)
def noisy(x: float) -> float:
    return scaled(x) + float(fx.random.normal(()))


@fx.uses(steps)
def tick() -> int:
    return steps.modify(lambda n: n + 1)


@fx.uses(log)
def record(carry: float, x: None) -> tuple[float, None]:
    log.emit(carry)
    return carry + 1.0, None


fast_scaled = fx.jit(scaled)
scaled_at_one = fx.handle(scaled, temperature.provide(1.0))
COUNTER = steps.init(0)


class Layer:
    @fx.uses(temperature)
    def __call__(self, x: float) -> float:
        return scaled(x)

    @fx.uses(steps)
    def count(self) -> int:
        return tick()

# declared with an annotation: the annotation is the variable's type
annotated: fx.Ask[float] = fx.Ask[float]("annotated")
final_steps: Final[fx.State[int]] = fx.State[int]("final_steps")

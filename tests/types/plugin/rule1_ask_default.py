"""Rules 1 and 2 for an `Ask` declared with `default=` (issue 27, item 3): its `ask()`
answers the default where no handler is installed, so it is never unhandled at module
level; it is still performed, so it still belongs in rows (inside a function whose
row omits it, a handler around the call is hidden and `ask()` raises
`UndeclaredEffectError` at run time). tests/types/plugin/asks/ has the same across
modules."""

from typing import Any, Final

import jax.numpy as jnp
from mylib import temperature

import effax as fx

level = fx.Ask[float]("level", default=0.5)  # traced
verbose = fx.Ask[bool]("verbose", static=True, default=False)
scale: Final = fx.Ask[float]("scale", default=1.0)  # annotated
annotated: fx.Ask[float] = fx.Ask[float]("annotated", default=2.0)
maybe = fx.Ask[float | None]("maybe", default=None)  # `None` is a default too
strict = fx.Ask[float]("strict")  # no default: needs a handler
lv = level  # a module-level alias: the same effect
OPTIONS: dict[str, Any] = {"default": 0.1}
optioned = fx.Ask[float]("optioned", **OPTIONS)  # may have a default: taken as one


@fx.uses(level, verbose)
def leveled(x: float) -> float:
    return x * level.ask() if verbose.ask() else x


@fx.uses(level, strict)
def mixed(x: float) -> float:
    return x * level.ask() * strict.ask()


# case: default Asks performed at module level, static and traced
level.ask()
verbose.ask()
scale.ask()
annotated.ask()
maybe.ask()
lv.ask()
optioned.ask()
print(level.ask() + float(verbose.ask()))


# case: an Ask without a default next to them is still reported
level.ask()
strict.ask()  # E: effax-unhandled: Effect "strict" is performed at module level, where no
with strict.provide(1.0):
    strict.ask()


# case: a function whose row holds only default Asks, called with no handler
leveled(1.0)
fx.jit(leveled)(1.0)
compiled = fx.jit(leveled)
compiled(2.0)
fx.handle(leveled, verbose.provide(True))(3.0)
fx.scan(lambda c, x: (c + level.ask(), None), 0.0, None, length=2)
fx.cond(True, lambda: level.ask(), lambda: scale.ask())


# case: a row mixing a default Ask and one without: only the latter is reported
mixed(1.0)  # E: effax-unhandled: "mixed" performs effect "strict" at module level
fx.jit(mixed)(1.0)  # E: effax-unhandled: "effax.jit(...)" performs effect "strict"
fx.scan(lambda c, x: (level.ask() + strict.ask(), x), 0.0, None, 2)  # E: effax-unhandled: "strict"
fx.handle(mixed, strict.provide(2.0))(1.0)
with strict.provide(2.0):
    mixed(1.0)


# case: a class body runs at module level
class Model:
    width = level.ask()
    depth = strict.ask()  # E: effax-unhandled: Effect "strict"


# case: a script's main block
if __name__ == "__main__":
    leveled(2.0)
    print(verbose.ask())


# case: a default Ask held in a class attribute (not tracked, as any effect there)
class Config:
    depth = fx.Ask[int]("depth", static=True, default=3)
    rate = fx.Ask[float]("rate")


Config.depth.ask()
Config.rate.ask()  # limit


# case: a default Ask in the row
@fx.uses(level, verbose)
def in_row(x: float) -> float:
    return leveled(x) + level.ask() + float(verbose.ask())


# case: a default Ask outside the row is undeclared, as at run time
@fx.uses(temperature)
def outside_row(x: float) -> float:
    y = x * level.ask()  # E: effax-undeclared: Effect "level" is neither in the effect row of
    return y + leveled(x)  # E: effax-undeclared: "leveled" performs effects "level", "verbose"


# case: a default Ask handled inside the function needs no row
@fx.uses()
def handled_inside(x: float) -> float:
    with level.provide(2.0), verbose.provide(True):
        return leveled(x) + level.ask()


# case: a pure entry point performing a default Ask
@fx.uses()
def pure(x: float) -> float:
    return x * verbose.ask()  # E: effax-undeclared: Effect "verbose"


# case: a function without a row: calls to it are not checked, as for any effect
def helper() -> float:
    return level.ask() + strict.ask()


helper()
print(jnp.float32(level.ask()))

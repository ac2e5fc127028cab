"""A library module of the `askdefault` package: no cases, mypy must report nothing here."""

from typing import Final

import effax as fx

level = fx.Ask[float]("level", default=0.5)
verbose: Final = fx.Ask[bool]("verbose", static=True, default=False)
strict = fx.Ask[float]("strict")  # no default

ROW = (level, verbose)  # a row kept in a tuple, for `effax.uses(*ROW)`


@fx.uses(level, verbose)
def leveled(x: float) -> float:
    return x * level.ask() if verbose.ask() else x


@fx.uses(level, strict)
def mixed(x: float) -> float:
    return x * level.ask() * strict.ask()


fast_leveled = fx.jit(leveled)
level.ask()  # answered by the default here too

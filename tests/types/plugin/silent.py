"""Where the plugin cannot know, it says nothing."""

from collections.abc import Callable
from typing import ParamSpec, TypeVar

import effax as fx
from mylib import scaled, steps, temperature

P = ParamSpec("P")
R = TypeVar("R")


def logged(fn: Callable[P, R]) -> Callable[P, R]:
    return fn


def make_effect() -> fx.State[int]:
    return fx.State[int]("made")


class Holder:
    effect = fx.Ask[int]("held")


# case: effects in class attributes, parameters and made by functions
@fx.uses()
def untracked_effects(effect: fx.Ask[int]) -> int:
    return Holder.effect.ask() + effect.ask() + make_effect().get()


# case: a row with an effect the plugin cannot read
@fx.uses(temperature, make_effect())
def unreadable_row() -> int:
    return steps.get()


# case: an unknown decorator around a row
@logged
@fx.uses(steps)
def wrapped() -> int:
    return steps.get()


@fx.uses()
def calls_wrapped() -> int:
    return wrapped()


# case: functions without a row are not checked
def no_row() -> float:
    return scaled(1.0) + steps.get()


# case: a decorator below the row does not change it
@fx.uses()
@logged
def undeclared_below_logged() -> int:
    return steps.get()  # E: effax-undeclared

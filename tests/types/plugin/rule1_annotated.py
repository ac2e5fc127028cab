"""Rule 1 with effects declared with an annotation, in another module."""

import effax as fx
from mylib import annotated, final_steps


# case: an annotated declaration from another module, in the row
@fx.uses(annotated, final_steps)
def covered() -> float:
    final_steps.set(final_steps.get() + 1)
    return annotated.ask()


# case: an annotated declaration from another module, not in the row
@fx.uses()
def leaky() -> float:
    return annotated.ask()  # E: effax-undeclared


# case: a Final declaration from another module, not in the row
@fx.uses(annotated)
def leaky_state() -> int:
    return final_steps.get()  # E: effax-undeclared


# case: calling a function whose row names them
@fx.uses()
def caller() -> float:
    return covered()  # E: effax-undeclared


# case: handled around the call
@fx.uses()
def handled() -> float:
    with annotated.provide(1.0), final_steps.init(0):
        return covered()

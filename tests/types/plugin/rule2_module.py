"""Rules 1 and 2 at module level, where nothing can handle an effect but a `with`."""

import jax

import effax as fx
from mylib import fast_scaled, log, record, scaled, steps, temperature

# case: an operation at module level
steps.get()  # E: effax-unhandled: Effect "steps" is performed at module level, where no enclosing "with" handles it

# case: a call at module level
scaled(1.0)  # E: effax-unhandled: "scaled" performs effect "temperature" at module level, where no enclosing "with" handles it

# case: under a handler at module level
with temperature.provide(1.0), steps.init(0):
    scaled(steps.get())
    fast_scaled(1.0)

# case: a script's main block
if __name__ == "__main__":
    fast_scaled(2.0)  # E: effax-unhandled: "fast_scaled"
    with temperature.provide(1.0):
        print(fast_scaled(2.0))

# case: control flow at module level
with log.collect(), temperature.provide(1.0):
    fx.scan(record, 0.0, None, length=2)
    fx.scan(lambda c, x: (c + temperature.ask(), None), 0.0, None, length=2)
fx.scan(record, 0.0, None, length=2)  # E: effax-unhandled: "effax.scan" performs effect "log"
fx.scan(lambda c, x: (c + temperature.ask(), None), 0.0, None, length=2)  # E: effax-unhandled: Effect "temperature"

# case: module-level code inside a function is not module level
def main() -> float:
    return scaled(jax.numpy.float32(1.0).item())

# case: a row declared on a lambda at module level performs nothing there
warm = fx.uses(temperature)(lambda x: x * temperature.ask())
with temperature.provide(1.0):
    warm(2.0)

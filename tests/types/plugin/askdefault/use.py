"""Cross-module cases: default Asks declared in `askdefault.lib`, used from here."""

import askdefault.lib as lib
import effax as fx
from askdefault.lib import ROW, fast_leveled, level, leveled, mixed, strict, verbose

# case: default Asks from another module, at module level
level.ask()
lib.verbose.ask()
leveled(1.0)
fast_leveled(1.0)
fx.jit(lib.leveled)(2.0)


# case: an Ask without a default from another module is still reported
strict.ask()  # E: effax-unhandled: Effect "strict" is performed at module level
mixed(1.0)  # E: effax-unhandled: "mixed" performs effect "strict" at module level


# case: the rows still hold default Asks from another module
@fx.uses()
def outside_row(x: float) -> float:
    y = leveled(x)  # E: effax-undeclared: "leveled" performs effects "level", "verbose"
    return y * lib.level.ask()  # E: effax-undeclared: Effect "level"


# case: default Asks from another module in the row
@fx.uses(*ROW)
def in_row(x: float) -> float:
    return leveled(x) * level.ask() * float(verbose.ask())

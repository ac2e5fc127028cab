"""The counter from JAX's guide to stateful computations, fixed with effax.

A plain object that mutates itself returns 1 forever under `jax.jit`: the side
effect ran once, at trace time. With effax the count lives in a `State` cell that
`effax.handle` passes into the compiled function and writes back after each call,
so the compiled counter counts, and it is traced once.

Run: python examples/counter.py [--quick]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

import effax as fx


class Counter:
    """JAX's broken example: state hidden in `self.n`."""

    def __init__(self) -> None:
        self.n = 0

    def count(self) -> int:
        self.n += 1
        return self.n


count = fx.State[jax.Array]("count")
traces: list[int] = []


def tick() -> jax.Array:
    """Library code: performs the `count` effect, no state in its signature."""
    traces.append(1)
    return count.modify(lambda n: n + 1)


def main(calls: int = 5) -> list[int]:
    broken = jax.jit(Counter().count)
    print("plain object under jax.jit:", [int(broken()) for _ in range(calls)])

    cell = count.init(jnp.int32(0))
    fast_tick = fx.handle(tick, cell, transform=jax.jit)
    counts = [int(fast_tick()) for _ in range(calls)]
    print("effax State under jax.jit: ", counts)
    print(f"traced {len(traces)} time(s); the cell now holds {int(cell.value)}")
    return counts


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer calls")
    main(3 if parser.parse_args().quick else 5)

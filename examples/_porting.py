"""What the ported examples (`svi.py`, `metropolis.py`) share to compare a port with
its original: timing a call, and counting the lines of each section of a script.

Not an example itself: the scripts import it (`python examples/svi.py` puts this
folder on the path).
"""

from __future__ import annotations

import ast
import pathlib
import time
from collections.abc import Callable
from typing import Any

import jax


def timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """`fn(*args)` and the seconds it took, waiting for the result."""
    start = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - start


def lines_of_code(path: str | pathlib.Path) -> dict[str, int]:
    """Lines of code in each `# --- title` section of `path`: no blanks, comments, docstrings."""
    source = pathlib.Path(path).read_text()
    docstrings = {
        line
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef) and ast.get_docstring(node) is not None
        for line in range(node.body[0].lineno, (node.body[0].end_lineno or 0) + 1)
    }
    counts: dict[str, int] = {}
    section = "header"
    for number, line in enumerate(source.splitlines(), start=1):
        text = line.strip()
        if text.startswith("# ---"):
            section = text.strip("# -")
            counts[section] = 0
        elif section != "header" and text and not text.startswith("#") and number not in docstrings:
            counts[section] += 1
    return counts


def print_table(lines: dict[str, int], port: float, original: float, *, rate: str) -> None:
    """Lines of code per section, and the rate `rate` names, port against original."""
    rows = [(k[6:], n, lines[f"original: {k[6:]}"]) for k, n in lines.items() if k[:5] == "port:"]
    rows.append(("total lines of code", sum(r[1] for r in rows), sum(r[2] for r in rows)))
    print(f"\n{'':34}{'effax port':>11}{'NumPyro':>9}{'ratio':>7}")
    for name, port_n, original_n in rows:
        print(f"{name:34}{port_n:11d}{original_n:9d}{port_n / original_n:7.2f}")
    rates = f"{port:11.0f}{original:9.0f}{port / original:7.2f}"
    print(f"{rate:34}{rates}")

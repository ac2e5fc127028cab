"""Lines of code of the programs a coming-from page shows side by side.

Used by the pages' opening tables, so the counts are those of the code the page
runs, taken when the docs are built.
"""

from __future__ import annotations

import pathlib
import re


def code_under(page: str | pathlib.Path, heading: str) -> str:
    """The code cells between the Markdown heading `heading` and the next heading."""
    text = pathlib.Path(page).read_text()
    section = re.split(r"^#+ ", text, flags=re.MULTILINE)
    body = next(s for s in section if s.split("\n", 1)[0].strip() == heading)
    cells = re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```", body, re.DOTALL | re.MULTILINE)
    return "\n".join(cells)


def lines_of_code(code: str) -> int:
    """Lines that are not blank, comments or cell options (``:tags:``)."""
    lines = (line.strip() for line in code.splitlines())
    return sum(1 for line in lines if line and not line.startswith(("#", ":")))


def table(page: str | pathlib.Path, original: str, port: str = "effax") -> str:
    """A Markdown table of the lines of code under two headings of `page`."""
    counts = [lines_of_code(code_under(page, h)) for h in (original, port)]
    return (
        f"| | {original} | {port} |\n|---|---:|---:|\n| lines of code | {counts[0]} | {counts[1]} |"
    )

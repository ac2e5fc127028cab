"""Open every page of the built docs in headless Chromium and report code that scrolls.

A development aid, not part of the test command (it needs a browser):

    pip install playwright          # the Python package only; no browser download
    python scripts/docs_layout.py docs/_build/html --width 1280 [--shots DIR]

It uses the system's Chromium (``--chromium``, default ``/usr/bin/chromium``) and
prints, for each page, the code blocks wider than their column at that width
(which a reader would have to scroll sideways); with ``--shots`` it also saves a
screenshot of each page's first screen. Exits 1 if any block scrolls.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from playwright.sync_api import sync_playwright

MEASURE = """() => [...document.querySelectorAll('div.highlight pre, div.cell_output pre')]
    .filter(pre => pre.scrollWidth > pre.clientWidth + 1)
    .map(pre => [pre.scrollWidth - pre.clientWidth, pre.innerText.split('\\n')
        .reduce((a, b) => (b.length > a.length ? b : a), '')])"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("site", type=pathlib.Path)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--shots", type=pathlib.Path)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    pages = sorted(p for p in args.site.rglob("*.html") if "_static" not in p.parts)
    pages = [p for p in pages if p.name not in {"genindex.html", "search.html"}]
    scrolling = 0
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": args.width, "height": 900})
        for path in pages:
            page.goto(path.resolve().as_uri())
            wide = page.evaluate(MEASURE)
            name = str(path.relative_to(args.site))
            if args.shots:
                args.shots.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=args.shots / (name.replace("/", "_") + ".png"))
            for overflow, line in wide:
                print(f"{name}: scrolls {overflow} px: {line.strip()[:90]}")
            scrolling += len(wide)
        browser.close()
    print(f"{len(pages)} pages at {args.width} px: {scrolling} code block(s) scroll sideways")
    return 1 if scrolling else 0


if __name__ == "__main__":
    sys.exit(main())

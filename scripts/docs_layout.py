"""Open every page of the built docs in headless Chromium and report code that scrolls.

A development aid, not part of the test command (it needs a browser):

    .venvs/default/bin/pip install playwright     # the Python package only
    .venvs/default/bin/python scripts/docs_layout.py docs/_build/html --width 1280 [--shots DIR]

Build the site first (README's sphinx-build command). It drives an installed
Chromium: ``--chromium PATH``, else the system's ``/usr/bin/chromium`` (``apt-get
install chromium``), else the one Playwright keeps (``python -m playwright install
chromium`` downloads it). It prints, for each page, the code blocks wider than their
column at that width (which a reader would have to scroll sideways); with ``--shots``
it also saves a screenshot of each page's first screen. Exits 1 if any block scrolls,
2 if there is no built site or no browser.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from playwright.sync_api import Error as PlaywrightError, sync_playwright

SYSTEM_CHROMIUM = "/usr/bin/chromium"

MEASURE = """() => [...document.querySelectorAll('div.highlight pre, div.cell_output pre')]
    .filter(pre => pre.scrollWidth > pre.clientWidth + 1)
    .map(pre => [pre.scrollWidth - pre.clientWidth, pre.innerText.split('\\n')
        .reduce((a, b) => (b.length > a.length ? b : a), '')])"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("site", type=pathlib.Path)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--shots", type=pathlib.Path)
    parser.add_argument("--chromium", help="the browser (default: /usr/bin/chromium if it exists)")
    args = parser.parse_args()
    pages = sorted(p for p in args.site.rglob("*.html") if "_static" not in p.parts)
    pages = [p for p in pages if p.name not in {"genindex.html", "search.html"}]
    if not pages:
        print(
            f"No built pages under {args.site}: build the docs site first (README's "
            "sphinx-build command).",
            file=sys.stderr,
        )
        return 2
    scrolling = 0
    if args.chromium is None and pathlib.Path(SYSTEM_CHROMIUM).exists():
        args.chromium = SYSTEM_CHROMIUM
    with sync_playwright() as pw:
        try:
            browser = pw.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        except PlaywrightError as error:
            print(
                f"No Chromium to run ({str(error).splitlines()[0]}): install one "
                f"(apt-get install chromium, or {sys.executable} -m playwright install "
                "chromium) or name it with --chromium PATH.",
                file=sys.stderr,
            )
            return 2
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

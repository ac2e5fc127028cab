"""Sphinx configuration: MyST notebooks executed on every build, warnings as errors.

Build: ``sphinx-build -j auto -W --keep-going -b html docs docs/_build/html``.
"""

from __future__ import annotations

import os
import pathlib
import re
import sys
import types
from typing import Any

# The multi-device page runs on 8 host CPU devices. The pages execute in Jupyter
# kernels started from this process, which inherit its environment; this must be
# set before anything imports JAX.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
# Plots in executed pages render without a display.
os.environ.setdefault("MPLBACKEND", "Agg")

DOCS = pathlib.Path(__file__).parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))

import effax  # noqa: E402

project = "effax"
author = "the effax authors"
copyright = "the effax authors"
release = effax.__version__
version = release

extensions = ["myst_nb", "sphinx.ext.autodoc"]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**.ipynb_checkpoints", "jupyter_execute"]
master_doc = "index"

# --- executing the pages ---------------------------------------------------------
nb_execution_mode = "force"  # every page runs on every build
nb_execution_raise_on_error = True  # an unexpected exception fails the build
nb_execution_timeout = 120  # seconds per cell
nb_execution_show_tb = True  # print the traceback of a failing cell in the log
nb_merge_streams = True
nb_render_markdown_format = "gfm"  # tables in markdown outputs (the benchmark page)
myst_enable_extensions = ["colon_fence", "deflist", "substitution"]
myst_heading_anchors = 3

# `{{ typing_guide }}` (docs/typing-overview.md) links the typing guide, docs/typing.md.
myst_substitutions = {"typing_guide": "[the typing guide](typing.md)"}

# --- API reference ---------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "exclude-members": "handler_hint"}
# Docstrings are reST (examples are doctest blocks, which pytest runs too) and
# write `name` for code, as the Markdown pages do.
default_role = "code"

# The theme of JAX's own documentation: a wide content column (code blocks of 100
# characters fit at 1280 px), the page's sections on the right, search in the bar.
html_theme = "sphinx_book_theme"
html_title = f"effax {release}"
html_static_path = ["_static"]
html_css_files = ["effax.css"]
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
}


def _public_names() -> list[str]:
    names = [n for n in dir(effax) if not n.startswith("_")]
    names = [n for n in names if not isinstance(getattr(effax, n), types.ModuleType)]
    names += [f"random.{n}" for n in effax.random.__all__]
    return sorted(names)


def _check_api_reference(app: Any) -> None:
    """Every public name of effax appears in the API reference."""
    from sphinx.util import logging

    text = (DOCS / "api.md").read_text()
    documented = set(re.findall(r"effax\.([\w.]+)", text))
    missing = [n for n in _public_names() if n not in documented]
    if missing:
        logging.getLogger(__name__).warning(
            "docs/api.md does not document these public names: %s", ", ".join(missing)
        )


def setup(app: Any) -> None:
    app.connect("builder-inited", _check_api_reference)

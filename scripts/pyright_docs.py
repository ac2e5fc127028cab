"""Type-check the docs pages' code cells with pyright, as the pages run them.

A page's ``{code-cell}`` blocks (docs/**/*.md) run one after another in one
namespace, and a cell may define a name again (the coming-from pages define a
`model` or a `train_step` twice: the other library's, then effax's). So each cell
becomes a Python module of its own in a temporary folder, which repeats the import
statements of the cells before it and imports from the module of the cell before
it the other names they defined, except those it defines again with a `def`, a
`class` or an annotation. Every cell keeps its lines where they are on its page
(every other line is blank, those imports are on the line of the cell's opening
fence), so pyright's reports point at the page's lines.

pyright checks them with the project's configuration ([tool.pyright] in
pyproject.toml; a cell's last expression, its output, is not an unused one), docs/
and examples/ on its import path (as the pages put them on sys.path), and the
packages of the interpreter running this script. A few errors from other
libraries' annotations, in their code on a page, are pinned (`THIRD_PARTY`). The
exit status is 0 when pyright reports no other error and every pin still matches.

    python scripts/pyright_docs.py [--strict] [PAGE.md ...]
"""

from __future__ import annotations

import argparse
import ast
import json
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
_FENCE = re.compile(r"^(`{3,})\{code-cell\}")

# Errors pyright reports in another library's code on a page (its users' code as
# they write it, which runs), from that library's annotations, never effax's:
# (page, rule, text of the line) -> why. Each must still be reported: a pin that
# no error matches fails the check, as an unneeded `# pyright: ignore` does.
THIRD_PARTY = {
    ("coming-from/flax.md", "reportOperatorIssue", ".apply({"): (
        "Linen's Module.apply is typed to return `Any | tuple[Any, variables]`, "
        "whether or not `mutable=` is given"
    ),
    ("coming-from/flax.md", "reportAttributeAccessIssue", "hidden.shape"): (
        "the intermediates of Linen's apply(..., mutable=...) are typed as variables"
    ),
    ("coming-from/flax.md", "reportArgumentType", 'rec.value["hidden"], hidden)'): (
        "the intermediates of Linen's apply(..., mutable=...) are typed as variables"
    ),
    ("coming-from/flax.md", "reportArgumentType", 'rec.value["hidden"], nnx_hidden)'): (
        "what nnx.capture returns is typed as an nnx.State"
    ),
}


def code_cells(page: pathlib.Path) -> list[tuple[int, list[str]]]:
    """The page's code cells: (the index of the line of its opening fence, the page's
    lines with the cell's lines in place and every other line blank)."""
    lines = page.read_text().splitlines()
    cells = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        i += 1
        if not fence:
            continue
        start, out = i - 1, [""] * len(lines)
        # the cell's options: a `:key: value` line each, or a `---` YAML block
        if i < len(lines) and lines[i].strip() == "---":
            i = lines.index("---", i + 1) + 1
        while i < len(lines) and lines[i].startswith(":"):
            i += 1
        while i < len(lines) and lines[i].rstrip() != fence[1]:
            out[i] = lines[i]
            i += 1
        i += 1
        cells.append((start, out))
    return cells


class Cell(ast.NodeVisitor):
    """What a cell leaves in its page's namespace: the names it binds, those among
    them it declares (a `def`, a `class`, an annotated assignment: a type of their
    own), and its import statements (repeated in the cells after it, rather than
    imported from it: a name imported from a package without type information is
    no name pyright can import again)."""

    def __init__(self, code: str) -> None:
        self.bound: set[str] = set()
        self.declared: set[str] = set()
        self.imports: list[str] = []
        for statement in ast.parse(code).body:
            self.visit(statement)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.bound.add(node.name)
        self.declared.add(node.name)
        for decorator in node.decorator_list:
            self.visit(decorator)  # the body is a scope of its own

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.bound.add(node.name)
        self.declared.add(node.name)
        for decorator in node.decorator_list:
            self.visit(decorator)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        pass

    def visit_comprehension(self, node: ast.comprehension) -> None:
        pass

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        self.imports.append(ast.unparse(node))

    visit_ImportFrom = visit_Import

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if isinstance(node.target, ast.Name):
            self.declared.add(node.target.id)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store):
            self.bound.add(node.id)


def module_name(page: pathlib.Path) -> str:
    """A module name for `page` that no import can mean (``docs_howto_state``)."""
    parts = page.relative_to(DOCS).with_suffix("").parts
    return "docs_" + "_".join(parts).replace("-", "_")


def write_modules(pages: list[pathlib.Path], folder: pathlib.Path) -> dict[str, pathlib.Path]:
    """Write each page's cells as modules into `folder`: {module path: page}."""
    where = {}
    for page in pages:
        previous, names, imports = None, set(), []  # what the cells before left
        for n, (fence, lines) in enumerate(code_cells(page)):
            cell = Cell("\n".join(lines))
            header = list(imports)
            if previous is not None and names - cell.declared:
                header.append(f"from {previous} import {', '.join(sorted(names - cell.declared))}")
            lines[fence] = "; ".join(header)
            module = folder / f"{module_name(page)}_{n:03d}.py"
            module.write_text("\n".join(lines) + "\n")
            where[str(module)] = page
            previous, names, imports = module.stem, names | cell.bound, imports + cell.imports
    return where


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="*", type=pathlib.Path, help="default: every page")
    parser.add_argument("--strict", action="store_true", help="pyright's strict mode")
    args = parser.parse_args()
    pages = [p.resolve() for p in args.pages] or sorted(
        p for p in DOCS.rglob("*.md") if "_build" not in p.relative_to(DOCS).parts
    )
    with tempfile.TemporaryDirectory(prefix="effax-docs-cells-") as tmp:
        folder = pathlib.Path(tmp)
        where = write_modules(pages, folder)
        config = {
            "extends": str(ROOT / "pyproject.toml"),
            "include": sorted(where),
            "exclude": [],
            "executionEnvironments": [
                {"root": ".", "extraPaths": [str(DOCS), str(ROOT / "examples")]}
            ],
            "reportUnusedExpression": "none",
            # a reader's `# type: ignore[code]` marks a line every checker refuses
            # (the misuse a cell shows raising), or one the mypy plugin does
            "enableTypeIgnoreComments": True,
            "reportUnnecessaryTypeIgnoreComment": "none",
        }
        if args.strict:
            config["typeCheckingMode"] = "strict"
        (folder / "pyrightconfig.json").write_text(json.dumps(config))
        result = subprocess.run(
            [sys.executable, "-m", "pyright", "--outputjson", "--pythonpath", sys.executable],
            cwd=folder,
            capture_output=True,
            text=True,
            check=False,
        )
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError:
        print(result.stdout + result.stderr, file=sys.stderr)
        return result.returncode or 2
    counts = dict.fromkeys(("error", "warning", "information", "third-party"), 0)
    pinned = dict.fromkeys(THIRD_PARTY, 0)
    for diagnostic in report["generalDiagnostics"]:
        file = diagnostic.get("file", "?")
        page = where.get(file)
        start = diagnostic["range"]["start"]
        severity, rule = diagnostic["severity"], diagnostic.get("rule", "")
        if page is not None:
            text = page.read_text().splitlines()[start["line"]]
            for key in THIRD_PARTY:
                if key == (str(page.relative_to(DOCS)), rule, key[2]) and key[2] in text:
                    pinned[key] += 1
                    severity = "third-party"
        counts[severity] += 1
        name = page.relative_to(ROOT) if page is not None else file
        message = diagnostic["message"]
        if severity == "third-party":
            message = message.splitlines()[0]
        print(
            f"{name}:{start['line'] + 1}:{start['character'] + 1} - "
            f"{severity}: {message}" + (f" ({rule})" if rule else "")
        )
    for (page_name, rule, text), n in pinned.items():
        if not n:
            counts["error"] += 1
            print(f"docs/{page_name}: error: no {rule} error on a line with {text!r} any more")
    print(
        f"{len(pages)} pages, {len(where)} code cells: {counts['error']} errors, "
        f"{counts['warning']} warnings, {counts['information']} informations "
        f"({counts['third-party']} errors from other libraries' annotations, pinned)"
    )
    return 1 if counts["error"] else 0


if __name__ == "__main__":
    sys.exit(main())

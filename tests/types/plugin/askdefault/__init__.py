"""Cross-module cases for an `Ask` declared with `default=`: `lib` declares, `use`
uses. mypy checks `lib` first and frees its syntax tree, so that an Ask has a
default reaches `use` through the declaration's type only (as from mypy's
incremental cache)."""

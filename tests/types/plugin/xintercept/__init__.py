"""Cross-module cases for interceptors (issue 42): `lib` defines them, `use` installs
them. mypy checks `lib` first and frees its function bodies, so whether a subclass's
method forwards reaches `use` through the class's metadata only."""

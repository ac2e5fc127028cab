#!/usr/bin/env bash
# The release as a user installs it: build effax's wheel (pip wheel --no-deps .), install
# it into a fresh virtual environment (no checkout, no editable install) with its runtime
# dependencies and mypy, and run scripts/wheel_smoke.py from a directory outside the
# checkout: effax and effax_stubs import from the environment, effax.__version__ is the
# wheel's metadata version and the checkout's, py.typed and the mypy plugin are there, a
# small handled program computes compiled what it computes eagerly; then mypy with the
# installed plugin reports an unhandled effect in a small module.
#   bash scripts/wheel_smoke.sh [JAX_VERSION]   (scripts/check.sh passes its default pin)
# Needs .venvs/default (its pip builds the wheel): run scripts/demo.sh or check.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."
jax_pin=()
if [ -n "${1:-}" ]; then jax_pin=("jax==$1" "jaxlib==$1"); fi
version="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' effax/__init__.py)"
mypy_pin="$(sed -n 's/^ *"\(mypy==[^"]*\)",$/\1/p' pyproject.toml)"  # the dev extra's mypy
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "==> wheel: build effax $version, install it into a fresh environment, smoke-test it"
pip=(--disable-pip-version-check -q)
.venvs/default/bin/pip wheel "${pip[@]}" --no-deps -w "$tmp/dist" .
wheel="$tmp/dist/effax-$version-py3-none-any.whl"
[ -f "$wheel" ] || { echo "ERROR: no $wheel built: $(ls "$tmp/dist")" >&2; exit 1; }
python3 -m venv "$tmp/env"
# --no-compile: the smoke program compiles what it imports (jax in full: 8 s more)
"$tmp/env/bin/pip" install "${pip[@]}" --no-compile "$wheel" "${jax_pin[@]}" "$mypy_pin"

mkdir "$tmp/user"
cp scripts/wheel_smoke.py "$tmp/user/"
cat >"$tmp/user/unhandled.py" <<'EOF'
import effax as fx

temperature = fx.Ask[float]("temperature")
print(temperature.ask())
EOF
# the plugin configured as a user does; JAX and NumPy read as Any (4 s instead of 15)
cat >"$tmp/user/mypy.ini" <<'EOF'
[mypy]
plugins = effax_stubs.mypy_plugin
[mypy-jax.*,jaxlib.*,numpy.*,ml_dtypes.*]
follow_imports = skip
EOF
cd "$tmp/user"  # outside the checkout: only the environment can provide effax
"$tmp/env/bin/python" wheel_smoke.py "$version"
if "$tmp/env/bin/mypy" --no-incremental unhandled.py >mypy.out 2>&1; then
  cat mypy.out
  echo "ERROR: mypy with the installed plugin reported nothing" >&2
  exit 1
fi
grep -q 'Effect "temperature" is performed at module level.*\[effax-unhandled\]' mypy.out || {
  cat mypy.out
  echo "ERROR: mypy with the installed plugin did not report the unhandled effect" >&2
  exit 1
}
echo "mypy $("$tmp/env/bin/mypy" --version | cut -d' ' -f2) with the installed plugin: effax-unhandled reported"

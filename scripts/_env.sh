# Sourced by the scripts here: create (once) and update a virtual environment.
#
# uv makes and fills an environment in about half pip's time (parallel downloads and
# installs; the same versions resolved: the pins below and pyproject.toml's ranges).
# It is taken from PyPI into .venvs/.uv on first use (about 2 s). Where it cannot be
# had or fails (EFFAX_PIP=1 forces this), pip does the same install. Either way the
# environment has pip in it (the README's commands use .venvs/default/bin/pip).

uv_bin() {  # print the path of a working uv, making .venvs/.uv first if needed
  local boot=".venvs/.uv"
  [ -z "${EFFAX_PIP:-}" ] || return 1
  if [ ! -x "$boot/bin/uv" ]; then
    rm -rf "$boot"
    python3 -m venv "$boot" >/dev/null 2>&1 &&
      "$boot/bin/python" -m pip install -q --disable-pip-version-check uv >/dev/null 2>&1 ||
      { rm -rf "$boot"; return 1; }
  fi
  "$boot/bin/uv" --version >/dev/null 2>&1 || return 1
  echo "$boot/bin/uv"
}

make_env() {  # make_env NAME PYTHON EXTRAS [REQUIREMENT...], e.g. jax==0.10.2 jaxlib==0.10.2
  local env=".venvs/$1" py="$2" extras="${3:-}" uv
  shift $(($# < 3 ? $# : 3))
  if uv="$(uv_bin)"; then
    # uv verifies TLS against its own roots unless told the system's (pip's PIP_CERT)
    if [ -n "${PIP_CERT:-}" ] && [ -z "${SSL_CERT_FILE:-}" ]; then
      export SSL_CERT_FILE="$PIP_CERT"
    fi
    if [ ! -x "$env/bin/python" ]; then
      echo "==> creating $env with $("$py" --version) (uv)"
      "$uv" venv -q --seed -p "$py" "$env" || rm -rf "$env"
    fi
    # --compile-bytecode: as pip does, so that no run pays for compiling jax's modules
    if [ -x "$env/bin/python" ] &&
      "$uv" pip install -q --python "$env/bin/python" --compile-bytecode -e ".${extras}" "$@"; then
      return 0
    fi
    echo "==> uv could not make $env; pip makes it" >&2
    rm -rf "$env"
  fi
  if [ ! -x "$env/bin/python" ]; then
    echo "==> creating $env with $("$py" --version)"
    "$py" -m venv "$env"
    "$env/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  fi
  # the pins go in the same install as effax, so they are resolved together with it
  "$env/bin/python" -m pip install -q --disable-pip-version-check -e ".${extras}" "$@"
}

# Sourced by the scripts here: create (once) and update a virtual environment.
make_env() {  # make_env NAME PYTHON EXTRAS [REQUIREMENT...], e.g. jax==0.10.2 jaxlib==0.10.2
  local env=".venvs/$1" py="$2" extras="${3:-}"
  shift $(($# < 3 ? $# : 3))
  if [ ! -x "$env/bin/python" ]; then
    echo "==> creating $env with $("$py" --version)"
    "$py" -m venv "$env"
    "$env/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  fi
  # the pins go in the same install as effax, so they are resolved together with it
  "$env/bin/python" -m pip install -q --disable-pip-version-check -e ".${extras}" "$@"
}

# Sourced by scripts/demo.sh and scripts/test.sh: go to the repository root, create .venv if it
# is missing, and (re)install kiln in editable mode with the extras in $1 when pyproject.toml
# is newer than the last install. Leaves PY set to the venv's python.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ ! -x .venv/bin/python ]; then
  echo "creating .venv ..."
  python3 -m venv .venv
fi
PY=.venv/bin/python
_extras="${1:-}"
_stamp=".venv/.kiln-installed${_extras:+-$_extras}"
if [ ! -f "$_stamp" ] || [ pyproject.toml -nt "$_stamp" ]; then
  echo "installing kiln${_extras:+ [$_extras]} into .venv ..."
  "$PY" -m pip install --quiet --disable-pip-version-check -e ".${_extras:+[$_extras]}"
  touch "$_stamp"
fi

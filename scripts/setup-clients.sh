#!/usr/bin/env bash
# The venv of the client-library tests (tests/clients/, CTest's client_libraries): the
# pinned versions of tests/clients/requirements.txt in build/clients-venv. Idempotent and
# quick when the venv already has them (a stamp holds the requirements it was made from).
# A failed install is reported and leaves no stamp: the suite then skips what it cannot
# import and says why.
#   scripts/setup-clients.sh            create or update build/clients-venv
#   CLIENTS_VENV=DIR ...                another place
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${CLIENTS_VENV:-build/clients-venv}
reqs=(tests/clients/requirements.txt tests/clients/requirements-nodeps.txt)
stamp=$venv/.requirements
want=$(cat "${reqs[@]}")

if [ -x "$venv/bin/python3" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "setup-clients: $venv is up to date"
  exit 0
fi
mkdir -p "$(dirname "$venv")"
[ -x "$venv/bin/python3" ] || /usr/bin/python3 -m venv "$venv"
pip=("$venv/bin/python3" -m pip install -q --disable-pip-version-check)
echo "setup-clients: installing the client libraries into $venv"
"${pip[@]}" -r tests/clients/requirements.txt
# (instructor's jiter pin conflicts with openai's: requirements-nodeps.txt says why)
"${pip[@]}" --no-deps -r tests/clients/requirements-nodeps.txt
printf '%s' "$want" > "$stamp"
echo "setup-clients: done"

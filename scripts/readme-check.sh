#!/usr/bin/env bash
# README word for word: clone this checkout, make the venv README suggests, run README's
# set-up command, then every quick-start line from the clone's root, each must exit 0.
# Both are read from README.md (scripts/readme_blocks.py), so this cannot drift from it.
# my_model.py, the quick start's user model, is tests/fixtures/user_model.py.
set -euo pipefail
cd "$(dirname "$0")/.."
ci_step=readme-check
source scripts/ci-lib.sh
git clone --quiet "$root" "$work/clone"
cd "$work/clone"
python3 -m venv .venv
# offline: README says nothing is fetched from a model hub at run time
export PYTHON=$PWD/.venv/bin/python HF_HUB_OFFLINE=1
cp tests/fixtures/user_model.py my_model.py
run_readme() {
  local rc=0
  echo "readme-check: $1"
  bash -c "$1" </dev/null >"$work/out.txt" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || fail "README's '$1' exited $rc: $(tail -n 5 "$work/out.txt")"
}
run_readme "$(python3 scripts/readme_blocks.py setup)"
python3 scripts/readme_blocks.py quickstart >"$work/quickstart.txt"
while IFS= read -r line; do run_readme "$line"; done <"$work/quickstart.txt"
echo "readme-check: README's set-up and all $(wc -l <"$work/quickstart.txt") quick-start lines exit 0"

# Sourced by the clean-install CI steps (wheel-check.sh, readme-check.sh) after they set
# ci_step and cd to the checkout: a temp work folder removed on exit, quiet pip, no
# PYTHONPATH (what was installed, not this checkout's src/, must be what runs), and `fail`,
# the step's one-line error and exit 1.
root=$PWD
work=$(mktemp -d "${TMPDIR:-/tmp}/halfprec-${ci_step:?}.XXXXXX")
trap 'rm -rf "$work"' EXIT
unset PYTHONPATH
pip_quiet=(--quiet --disable-pip-version-check)
fail() {
  echo "$ci_step: $1" >&2
  exit 1
}

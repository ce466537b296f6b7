# Shared by the quickstart scripts (sourced, not run).
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# The embedded model is a plumbing default: some (or all) of its outputs may be unreadable. A generator says so
# with exit 3 (some failed) or 4 (all failed); the demo reports it and goes on.
model_step() {
  local rc=0
  "$@" || rc=$?
  if [ "$rc" -eq 3 ] || [ "$rc" -eq 4 ]; then echo "(the embedded model's output could not all be read: exit $rc; the demo goes on)"
  elif [ "$rc" -ne 0 ]; then return "$rc"; fi
}

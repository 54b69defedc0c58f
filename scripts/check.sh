#!/usr/bin/env bash
# The whole check, in stages: the README's test command runs it, and CI runs that command
# (.ci/run). Each stage stops the check when it fails, so the quick ones come first:
#   1. style and types: ruff check, ruff format --check, mypy (strict, on fa_hetdp);
#   2. every test not marked slow, on two worker processes (pytest-xdist);
#   3. the slow tests (Flower simulations and deployments), on two worker processes too: they
#      wait on Flower's polls and process starts more than they compute, and each has its own
#      FLWR_HOME, free ports and temp folders (21.5 min with -n 2 at load 5, about 30 in one).
# Run from anywhere; it runs in the repository root, with the Python it is given
# (PYTHON, default: python; the one that `pip install -e ".[test]"` installed into).
set -euo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-python}"
# Tests that start Flower processes want their own Flower home and no telemetry.
export FLWR_TELEMETRY_ENABLED=0
if [ -z "${FLWR_HOME:-}" ]; then
    FLWR_HOME="$(mktemp -d)"
    export FLWR_HOME
fi

stage() {
    local name="$1"
    shift
    local start=$SECONDS
    printf '\n== %s ==\n' "$name"
    "$@"
    printf '== %s: passed in %d s ==\n' "$name" "$((SECONDS - start))"
}

lint() {
    "$py" -m ruff check .
    "$py" -m ruff format --check .
    "$py" -m mypy
}

stage "1/3 ruff, ruff format --check, mypy" lint
stage "2/3 tests not marked slow (-n 2)" "$py" -m pytest -m "not slow" -n 2
# --durations: the log names the 30 slowest, so CI's record says where the slow stage's time goes
stage "3/3 slow tests (-n 2)" "$py" -m pytest -m slow -n 2 --durations=30
printf '\nall stages passed in %d s\n' "$SECONDS"

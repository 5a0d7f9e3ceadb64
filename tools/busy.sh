#!/usr/bin/env bash
# Runs a command on a busy machine: BUSY_LOOPS processes (default 2, one per core of a 2-core CI
# machine) spin on the CPU from before it starts until it ends, as the other jobs of a shared
# machine would. Exits with the command's status; the loops always go with it:
#   tools/busy.sh .venv/bin/python -m pytest tests       (what `make test-busy` runs)
# Each loop is a plain Python busy loop that also ends by itself once this script is gone (its
# parent changes), so that not even a `kill -9` of this script leaves one spinning.
set -uo pipefail
loops=${BUSY_LOOPS:-2}
python=${BUSY_PYTHON:-python3}
pids=()

stop_loops() {
    local status=$?
    trap - EXIT INT TERM
    if (( ${#pids[@]} )); then
        kill "${pids[@]}" 2>/dev/null
        wait "${pids[@]}" 2>/dev/null
    fi
    exit "$status"
}
trap stop_loops EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for (( i = 0; i < loops; i++ )); do
    "$python" -c 'import os, sys
parent = int(sys.argv[1])
while os.getppid() == parent:
    pass' "$$" &
    pids+=($!)
done
echo "busy.sh: ${loops} busy loops (pids ${pids[*]:-none}) while: $*" >&2
"$@"

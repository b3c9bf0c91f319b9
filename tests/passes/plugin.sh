#!/usr/bin/env bash
# Loads the example pass from its plugin build and checks that einc lists it
# as coming from the plugin and that running it merges the duplicate
# AllGather of tests/passes/dup_gather.ein.
set -euo pipefail
einc=$1 plugin=$2 src=$3
list=$("$einc" --load-pass="$plugin" --list-passes)
echo "$list" | grep -q "cse-collectives .*\[plugin $plugin\]" || { echo "plugin pass not listed: $list"; exit 1; }
before=$("$einc" --passes=propagate --meshslice=off --dump-ir "$src" | grep -c "AllGather_Y" || true)
after=$("$einc" --load-pass="$plugin" --passes=propagate,cse-collectives --meshslice=off --dump-ir "$src" | grep -c "AllGather_Y" || true)
echo "AllGather_Y ops: $before without the pass, $after with it"
[ "$before" -ge 2 ] && [ "$after" -eq 1 ]
"$einc" --load-pass=/nonexistent.so --list-passes 2>&1 | grep -q "cannot load pass plugin" 

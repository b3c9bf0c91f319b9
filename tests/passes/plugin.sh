#!/usr/bin/env bash
# Loads the example pass from its plugin build: einc must list it as coming
# from the plugin, and running it on the FSDP example must move the
# AllGather_X of Wout in front of the first einsum (without it, propagate
# places it just before the second einsum).
set -euo pipefail
einc=$1 plugin=$2 src=$3
list=$("$einc" --load-pass="$plugin" --list-passes)
echo "$list" | grep -q "prefetch-params .*\[plugin $plugin\]" || { echo "plugin pass not listed: $list"; exit 1; }
# Line number of the first line matching $2 in the dump $1.
first() { echo "$1" | grep -n -m1 -- "$2" | cut -d: -f1; }
plain=$("$einc" --passes=propagate --meshslice=off --dump-ir "$src")
moved=$("$einc" --load-pass="$plugin" --passes=propagate,prefetch-params --meshslice=off --dump-ir "$src")
echo "without the pass: Wout gather at line $(first "$plain" 'AllGather_X Wout'), first einsum at $(first "$plain" einsum)"
echo "with the plugin:  Wout gather at line $(first "$moved" 'AllGather_X Wout'), first einsum at $(first "$moved" einsum)"
[ "$(first "$plain" 'AllGather_X Wout')" -gt "$(first "$plain" einsum)" ]
[ "$(first "$moved" 'AllGather_X Wout')" -lt "$(first "$moved" einsum)" ]
if "$einc" --load-pass=/nonexistent.so --list-passes 2>/tmp/einc_plugin_err.$$; then
  echo "loading a missing plugin succeeded"; exit 1
fi
grep -q "cannot load pass plugin" /tmp/einc_plugin_err.$$
rm -f /tmp/einc_plugin_err.$$

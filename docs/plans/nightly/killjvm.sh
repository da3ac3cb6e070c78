#!/usr/bin/env bash
# Runs msgboard export on SNAP into OUT and kills its JVM (kill -9) DELAY
# seconds after the JVM appears; keeps stdout/stderr in LOG.{out,err}.
set -u
snap=$1 out=$2 delay=$3 log=$4
nice -n 5 /work/main/.venv/bin/msgboard export "$snap" "$out" >"$log.out" 2>"$log.err" &
cli=$!
desc() { for c in $(ps -o pid= --ppid "$1"); do echo $c; desc $c; done; }
jvm=""
for i in $(seq 1 240); do
  jvm=$(desc "$cli" | while read p; do tr "\0" " " </proc/$p/cmdline 2>/dev/null | grep -v launcher.Main | grep -q SparkSubmit && [ "$(cat /proc/$p/comm)" = java ] && echo $p; done | head -1)
  [ -n "$jvm" ] && break
  sleep 0.5
done
echo "cli $cli jvm $jvm" >&2
sleep "$delay"
[ -n "$jvm" ] && kill -9 "$jvm"
wait "$cli"; echo "exit status $?" >&2

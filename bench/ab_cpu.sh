#!/bin/bash
# CPU cost of the same `headwater bench` workload in two checkouts, alternated round by round
# (issue 18's before/after check). On a shared, loaded machine records/s moves 2-4x between
# identical runs; CPU seconds per workload moves far less, so this compares CPU.
#
# Usage: bash bench/ab_cpu.sh BEFORE_TREE AFTER_TREE [ROUNDS]
#   each tree is a checkout with its own .venv (`make install`).
# Per round and tree: `headwater dev` (etcd, 1 controller, 1 broker, 1 coordinator) in a temporary
# folder, then 300,000 records of 100 B, acks=1, one partition: `bench produce --mode send`
# (one send() per record), `--mode many` (send_many), `bench consume`; each client under
# /usr/bin/time (user+sys, interpreter start included) and the broker's utime+stime from
# /proc/PID/stat around each workload. Prints the per-round figures and their medians.
set -u
before=$1; after=$2; rounds=${3:-6}
out=$(mktemp -d /tmp/ab-cpu-XXXX)

one() { # tree-dir label round
  local dir=$1 label=$2 round=$3 data pid bs bpid dev f
  data=$(mktemp -d /tmp/ab-cluster-XXXX)
  (cd "$dir" && exec .venv/bin/headwater dev --data-dir "$data" --brokers 1 --controllers 1 \
      --coordinators 1 --no-restart) > "$data/dev.out" 2>&1 &
  pid=$!
  for _ in $(seq 1 120); do grep -q "bootstrap:" "$data/dev.out" && break; sleep 1; done
  bs=$(grep -o "bootstrap: [0-9.:]*" "$data/dev.out" | head -1 | awk '{print $2}')
  bpid=$(pgrep -f "services.broker" | while read -r p; do
    grep -q "$data" "/proc/$p/cmdline" 2>/dev/null && echo "$p"; done | head -1)
  cpu() { awk '{printf "%.2f", ($14+$15)/100}' "/proc/$bpid/stat"; }
  f="$out/$label-$round.txt"
  {
    for mode in send many; do
      b0=$(cpu)
      /usr/bin/time -f "CLIENT $mode %U %S" "$dir/.venv/bin/headwater" --bootstrap "$bs" bench \
        produce --topic "t-$mode" --partitions 1 --replication-factor 1 --num-records 300000 \
        --record-size 100 --acks 1 --mode "$mode" --warmup-records 20000 2>&1 | tail -2
      echo "BROKER $mode $b0 $(cpu)"
    done
    b0=$(cpu)
    /usr/bin/time -f "CLIENT consume %U %S" "$dir/.venv/bin/headwater" --bootstrap "$bs" bench \
      consume --topic t-many --num-records 300000 2>&1 | tail -2
    echo "BROKER consume $b0 $(cpu)"
  } > "$f" 2>&1
  kill -INT "$pid"
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -9 "$pid" 2>/dev/null
  rm -rf "$data"
}

for r in $(seq 1 "$rounds"); do
  one "$before" before "$r"
  one "$after" after "$r"
done

python3 - "$out" <<'PY'
import glob, re, statistics, sys
rows = {}
for f in sorted(glob.glob(sys.argv[1] + "/*.txt")):
    label = f.rsplit("/", 1)[1].split("-")[0]
    s = open(f).read()
    for m in re.finditer(r"CLIENT (\w+) ([\d.]+) ([\d.]+)", s):
        rows.setdefault((m[1], "client", label), []).append(float(m[2]) + float(m[3]))
    for m in re.finditer(r"BROKER (\w+) ([\d.]+) ([\d.]+)", s):
        rows.setdefault((m[1], "broker", label), []).append(float(m[3]) - float(m[2]))
print("| workload | process | before CPU s (median) | after CPU s (median) | after/before |")
print("|---|---|---:|---:|---:|")
for work in ("send", "many", "consume"):
    for proc in ("client", "broker"):
        b = statistics.median(rows[(work, proc, "before")])
        a = statistics.median(rows[(work, proc, "after")])
        print(f"| {work} | {proc} | {b:.2f} | {a:.2f} | {a / b:.2f}x |")
PY
echo "per-round files: $out"

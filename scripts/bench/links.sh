#!/usr/bin/env bash
# links.sh: what the per-node links of scripts/cluster/pc-cluster.sh carry on this machine,
# for MPI (pc-bench link, apps/bench_link.c) and for torch's gloo (link_gloo.py beside this
# script), with 1 and 2 concurrent flows, at each shaped rate (and unshaped).
#
#   scripts/bench/links.sh [--out DIR] [--seconds S] [--bytes SIZE] [--depth N]
#                          [--rates "1gbit 2500mbit 10gbit 25gbit none"] [--flows "1 2"]
#                          [--tools "mpi gloo"] [--cores split|shared] [--build DIR]
#
# For each rate: `pc-cluster.sh up` 2 nodes with that link (DIR/cluster), then for each tool
# and flow count F, 2F ranks with --map-by node (rank r on node r mod 2), so that rank 2i on
# node0 streams to rank 2i+1 on node1: F flows through the same link pair, every one at
# once, for --seconds (default 5) in --bytes messages (default 4M), --depth in flight
# (default 4); then `down`. Only the cluster this script brought up is taken down (also
# on failure or interruption); it refuses a DIR that already records one.
# --cores: pc-cluster.sh's (default split: on 2 cores, one core per node, so 2 flows
# put 2 ranks on each node's core). --build: the build holding apps/pc-bench (default
# build/). Needs root (network namespaces) and, for gloo, /usr/bin/python3 with torch.
# Writes DIR/RATE-TOOL-fF.log (each run's output, its command first), DIR/results.jsonl
# (each run's JSON line with rate and load added) and DIR/summary.txt (printed): rate, tool,
# flows, the achieved total Gbit/s, the shaped rate, achieved/shaped, each flow's Gbit/s,
# and the 1-minute load average before the run (other work on the machine lowers the
# figures: the header has uptime before and after). Default DIR: results/links-DATE.
# Exit status: 0; 1 when a run failed (after every run and the summary); 2 for a bad flag.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
me=links.sh
usage_error() {
    echo "$me: $* (see --help)" >&2
    exit 2
}

out=""
seconds=5
bytes=4M
depth=4
rates="1gbit 2500mbit 10gbit 25gbit none"
flows="1 2"
tools="mpi gloo"
cores="split"
build="$PC_TOP/build"
while [ $# -gt 0 ]; do
    case $1 in
    --out) pc_need "$1" "${2:-}"; out=$2; shift ;;
    --seconds) pc_need "$1" "${2:-}"; seconds=$2; shift ;;
    --bytes) pc_need "$1" "${2:-}"; bytes=$2; shift ;;
    --depth) pc_need "$1" "${2:-}"; depth=$2; shift ;;
    --rates) pc_need "$1" "${2:-}"; rates=$2; shift ;;
    --flows) pc_need "$1" "${2:-}"; flows=$2; shift ;;
    --tools) pc_need "$1" "${2:-}"; tools=$2; shift ;;
    --cores) pc_need "$1" "${2:-}"; cores=$2; shift ;;
    --build) pc_need "$1" "${2:-}"; build=$2; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
    esac
    shift
done
# The values pc-bench link and link_gloo.py would refuse are refused here, before any
# cluster is up.
awk -v s="$seconds" 'BEGIN { exit !(s ~ /^[0-9]+(\.[0-9]+)?$/ && s >= 0.25 && s <= 3600) }' \
    || usage_error "--seconds: '$seconds' is not a number of seconds from 0.25 to 3600"
[[ $bytes =~ ^[0-9]+[KMG]?$ ]] || usage_error "--bytes: '$bytes' is not a size like 65536, 64K or 4M"
[[ $depth =~ ^[0-9]+$ ]] && [ "$depth" -ge 1 ] && [ "$depth" -le 64 ] \
    || usage_error "--depth: '$depth' is not a count from 1 to 64"
for r in $rates; do
    [[ $r =~ ^(none|[0-9]+(\.[0-9]+)?[kmg]?bit)$ ]] || usage_error "--rates: '$r' is not like 1gbit, 2500mbit or none"
done
for f in $flows; do
    [[ $f =~ ^[1-9][0-9]?$ ]] || usage_error "--flows: '$f' is not a count from 1 to 99"
done
for t in $tools; do
    case $t in mpi|gloo) ;; *) usage_error "--tools: '$t' is not mpi or gloo" ;; esac
done
case $cores in split|shared) ;; *) usage_error "--cores: '$cores' is not split or shared" ;; esac
[ -n "$rates" ] && [ -n "$flows" ] && [ -n "$tools" ] || usage_error "--rates, --flows and --tools need at least one value"
[ "$(id -u)" = 0 ] || pc_die "needs root (pc-cluster.sh creates network namespaces)"
bench="$build/apps/pc-bench"
gloo="$PC_TOP/scripts/bench/link_gloo.py"
py=/usr/bin/python3
[ -x "$bench" ] || pc_die "no $bench: build first (or --build DIR)"
if [[ " $tools " == *" gloo "* ]] && ! "$py" -c 'import torch.distributed' 2>/dev/null; then
    pc_die "gloo: $py cannot import torch.distributed (apt-get install python3-torch, or --tools mpi)"
fi
pcc="$PC_TOP/scripts/cluster/pc-cluster.sh"
out=${out:-$PC_TOP/results/links-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cl="$out/cluster"
[ ! -f "$cl/cluster" ] || pc_die "$cl already records a cluster: not ours to take down ($pcc down $cl)"

# The cluster this script brought up, taken down however the script ends.
cl_up=""
cleanup() {
    [ -z "$cl_up" ] || "$pcc" down "$cl" >/dev/null 2>&1 || true
    cl_up=""
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# shaped_gbps RATE: tc's rate in Gbit/s (decimal, as tc's units), "-" when none.
shaped_gbps() {
    [ "$1" = none ] && { echo -; return; }
    awk -v r="$1" 'BEGIN {
        n = r + 0; u = substr(r, length(n "") + 1)
        m = 1; if (u ~ /^k/) m = 1e3; else if (u ~ /^m/) m = 1e6; else if (u ~ /^g/) m = 1e9
        printf "%g", n * m / 1e9 }'
}

summary="$out/summary.txt"
{
    echo "# $me: what the links of pc-cluster.sh carry (2 nodes, --cores $cores; $(nproc) cores)"
    echo "# ${seconds} s per run, $bytes-byte messages, $depth in flight per flow; $(uname -r)"
    echo "# uptime before: $(uptime)"
    printf '%-9s %-5s %5s %10s %8s %9s  %-22s %s\n' rate tool flows gbit/s shaped achieved/shaped \
        "per-flow gbit/s" load1
} >"$summary"
: >"$out/results.jsonl"
port=$((29700 + $$ % 1000 * 16))
failed=0
limit=$(awk -v s="$seconds" 'BEGIN { printf "%d", s + 120 }')

# run_one RATE TOOL FLOWS: one run, its log, its summary row.
run_one() {
    local rate=$1 tool=$2 f=$3 np log load cmd js row shaped
    np=$((2 * f))
    log="$out/$rate-$tool-f$f.log"
    load=$(cut -d' ' -f1 /proc/loadavg)
    if [ "$tool" = mpi ]; then
        cmd=("$pcc" mpirun "$cl" -np "$np" --map-by node "$bench" link --seconds "$seconds"
             --bytes "$bytes" --depth "$depth")
    else
        port=$((port + 1))
        cmd=("$pcc" mpirun "$cl" -np "$np" --map-by node -x MASTER_ADDR="$master"
             -x MASTER_PORT="$port" -x GLOO_SOCKET_IFNAME=eth0 "$py" "$gloo" --seconds "$seconds"
             --bytes "$bytes" --depth "$depth")
    fi
    echo "${cmd[*]#"$PC_TOP"/}" >"$log"
    shaped=$(shaped_gbps "$rate")
    row=""
    if timeout "$limit" "${cmd[@]}" </dev/null >>"$log" 2>&1 &&
        js=$(grep '^{"benchmark": "link"' "$log" | tail -n 1) && [ -n "$js" ]; then
        row=$("$py" - "$js" "$rate" "$tool" "$shaped" "$load" "$out/results.jsonl" <<'PY'
import json, sys
js, rate, tool, shaped, load, jsonl = sys.argv[1:]
j = json.loads(js)
j.update({"rate": rate, "load1": float(load),
          "shaped_gbps": None if shaped == "-" else float(shaped)})
with open(jsonl, "a") as f:
    f.write(json.dumps(j) + "\n")
ratio = "-" if shaped == "-" else "%.2f" % (j["total_gbps"] / float(shaped))
flows = ",".join("%.2f" % g for g in j["flow_gbps"])
print("%-9s %-5s %5d %10.2f %8s %9s  %-22s %s" % (rate, tool, j["flows"], j["total_gbps"],
                                                  shaped, ratio, flows, load))
PY
        ) || row=""
    fi
    if [ -z "$row" ]; then
        row=$(printf '%-9s %-5s %5d %10s %8s %9s  %-22s %s' "$rate" "$tool" "$f" failed "$shaped" - \
            "(see ${log##*/})" "$load")
        failed=1
    fi
    echo "$row" | tee -a "$summary"
}

for rate in $rates; do
    pc_say "link $rate: 2 nodes"
    cl_up=1
    "$pcc" up "$cl" --nodes 2 --link "$rate" --cores "$cores" >"$out/cluster-$rate.txt" 2>&1 \
        || { cat "$out/cluster-$rate.txt" >&2; pc_die "pc-cluster.sh up --link $rate failed"; }
    master=$(awk 'NR == 1 { print $2 }' "$cl/nodes")
    for tool in $tools; do
        for f in $flows; do
            run_one "$rate" "$tool" "$f"
        done
    done
    "$pcc" down "$cl" >/dev/null
    cl_up=""
done
echo "# uptime after: $(uptime)" >>"$summary"
echo
cat "$summary"
exit "$failed"

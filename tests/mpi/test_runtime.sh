#!/usr/bin/env bash
# MPI integration tests of the parameter-server runtime (every mpirun under a timeout):
#  - exact aggregation of known gradients: 1 to 4 workers, 1 and 2 servers, several chunk
#    sizes, inline and pipelined (from 3 workers on, the summation order shows in the bits);
#  - --pipeline on and off save bitwise-identical parameters (topk, dgc with 2 servers; 2 to
#    4 workers);
#  - --pull dense and sparse give bitwise-identical parameters;
#  - --priority forward and fifo give bitwise-identical parameters;
#  - --update workers (the servers only sum, every worker steps) gives bitwise the model of
#    --update servers: SGD with momentum (--compress none), topk with error feedback
#    (inline) and AdamW with it, every worker's parameters checked against worker 0's
#    (pc_example --save); exact aggregation with it, 3 workers, 2 servers;
#  - --compress none in PS mode matches --mode allreduce within 1e-5 relative;
#  - ratio 0 (empty messages) completes;
#  - metrics: one line per worker and server iteration; inline exposed == compress time;
#    the breakdown's fields in every mode (pipelined, inline, allreduce both ways): present,
#    non-negative, exposed <= compress, the update wait's parts sum to t_param_wait, and
#    each mode's definition of exposed;
#  - gradients handed over as views (pc_worker_grad_ready_view) from a pool, with a
#    not_before: the same bits as exact aggregation, every fold after its not_before, and
#    in allreduce mode the same parameters as the registered buffers give;
#  - pc_worker_set_device_step: allreduce's step held as device time, parameters untouched;
#  - --dilate 3 gives the same bits as --dilate 1 (pipelined, inline, allreduce), and the
#    compressor's time per iteration with it is printed against K = 1's (not asserted);
#  - malformed messages from a worker are rejected, naming the sender;
#  - a rank killed mid-run makes the job end, not hang; SIGTERM stops it cleanly.
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
run="$PC_SRCDIR/scripts/pc-mpirun.sh"
ex="$PC_BUILDDIR/apps/examples/pc_example"
mpi="$PC_BUILDDIR/tests/mpi/test_runtime_mpi"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Exact aggregation. With 1 or 2 workers any summation order gives the same bits; 3 and 4
# workers check that the servers sum in rank order.
for args in "-np 2 --servers 1 --chunk-bytes 4M" "-np 3 --servers 1 --chunk-bytes 64" \
            "-np 4 --servers 2 --chunk-bytes 256" "-np 4 --servers 2 --chunk-bytes 4M" \
            "-np 4 --servers 1 --chunk-bytes 64" "-np 5 --servers 1 --chunk-bytes 4M" \
            "-np 6 --servers 2 --chunk-bytes 256"; do
    np=$(awk '{print $2}' <<<"$args"); flags=${args#-np $np }
    for pipe in on off; do
        if out=$("$run" -t 60 -np "$np" "$mpi" exact $flags --pipeline "$pipe" --compress none \
                 --momentum 0 --lr 0.5 --pull dense 2>&1) && grep -q 'match bit for bit' <<<"$out"; then
            ok "exact aggregation, np $np $flags --pipeline $pipe"
        else
            bad "exact aggregation, np $np $flags --pipeline $pipe"; echo "$out" | tail -5
        fi
    done
done

# Gradients as views (pc_worker_grad_ready_view): the registered buffers hold NaN, the views
# move every iteration and a grouped chunk's views are gathered; the not_before is kept.
for args in "-np 3 --servers 1" "-np 3 --servers 1 --chunk-bytes 64" "-np 4 --servers 2 --chunk-bytes 256"; do
    np=$(awk '{print $2}' <<<"$args"); flags=${args#-np $np }
    for pipe in on off; do
        # shellcheck disable=SC2086
        if out=$("$run" -t 60 -np "$np" "$mpi" view $flags --pipeline "$pipe" --compress none \
                 --momentum 0 --lr 0.5 --pull dense 2>&1) && grep -q 'match bit for bit' <<<"$out" \
                 && grep -q 'every fold began after its not_before' <<<"$out"; then
            ok "views, np $np $flags --pipeline $pipe: $(grep -o 'the hand-overs returned.*' <<<"$out")"
        else
            bad "views, np $np $flags --pipeline $pipe"; echo "$out" | tail -5
        fi
    done
done
for pipe in on off; do
    a=$("$run" -t 60 -np 3 "$mpi" exact --mode allreduce --pipeline "$pipe" 2>&1 | grep -o 'parameters hash .*')
    b=$("$run" -t 60 -np 3 "$mpi" view --mode allreduce --pipeline "$pipe" 2>&1 | grep -o 'parameters hash .*')
    [ -n "$a" ] && [ "$a" = "$b" ] && ok "views, allreduce --pipeline $pipe: $b as with the registered buffers" \
        || bad "views, allreduce --pipeline $pipe: '$b' != '$a'"
    if out=$("$run" -t 60 -np 2 "$mpi" devstep --mode allreduce --pipeline "$pipe" 2>&1) \
       && grep -q '^devstep:' <<<"$out"; then
        ok "device step, --pipeline $pipe: $(grep -o 'devstep: .*' <<<"$out")"
    else
        bad "device step, --pipeline $pipe"; echo "$out" | tail -5
    fi
done

# --dilate K: the CPU work is followed by (K - 1) times its duration of sleep; the
# arithmetic is untouched. The compressor's time per iteration (busy and the dilation's
# sleep) against K = 1's is printed: a figure, not a timed assertion.
dilate() { # NAME NP FLAGS...
    local name=$1 np=$2; shift 2
    for k in 1 3; do
        "$run" -t 120 -np "$np" "$ex" --iters 15 "$@" --dilate "$k" --metrics "$tmp/d$k.jsonl" \
            --save "$tmp/d$k.bin" >"$tmp/d$k.log" 2>&1 || { bad "dilate $name: --dilate $k run failed"; tail -n 3 "$tmp/d$k.log"; return; }
    done
    if cmp -s "$tmp/d1.bin" "$tmp/d3.bin"; then
        ok "dilate $name: --dilate 3 == --dilate 1, $(python3 - "$tmp/d1.jsonl" "$tmp/d3.jsonl" <<'PY'
import sys, json, statistics
def med(f, k):
    rows = [json.loads(l) for l in open(f)]
    return statistics.median(r[k] for r in rows if r["role"] == "worker" and r["iteration"] >= 3)
c1, c3 = med(sys.argv[1], "t_compress"), med(sys.argv[2], "t_compress")
i1, i3 = med(sys.argv[1], "t_iteration"), med(sys.argv[2], "t_iteration")
comp = ("compression %.3f -> %.3f ms/iteration (x%.2f), " % (c1 * 1e3, c3 * 1e3, c3 / c1)
        if c1 > 0 else "")
print("%siteration %.1f -> %.1f ms" % (comp, i1 * 1e3, i3 * 1e3))
PY
)"
    else
        bad "dilate $name: --dilate 3 changed the model"
    fi
}
dilate "topk pipelined" 3 --compress topk:ratio=0.01
dilate "dgc inline" 3 --compress dgc:ratio=0.01 --pipeline off
dilate "allreduce" 2 --mode allreduce --compress none

# Pipelined and inline, and either priority order: bitwise the same.
# same_as NAME NP "FLAGS A" "FLAGS B" FLAGS...: the two runs save the same model.
same_as() {
    local name=$1 np=$2 a=$3 b=$4; shift 4
    # shellcheck disable=SC2086
    "$run" -t 120 -np "$np" "$ex" --iters 25 "$@" $a --save "$tmp/a.bin" >"$tmp/a.log" 2>&1 \
        && "$run" -t 120 -np "$np" "$ex" --iters 25 "$@" $b --save "$tmp/b.bin" >"$tmp/b.log" 2>&1 \
        && cmp -s "$tmp/a.bin" "$tmp/b.bin" && ok "$name: $a == $b" \
        || { bad "$name: $a != $b"; tail -n 3 "$tmp/a.log" "$tmp/b.log"; }
}
same() { # NAME NP FLAGS...
    local name=$1 np=$2; shift 2
    same_as "$name" "$np" "--pipeline on" "--pipeline off" "$@"
}
same "topk" 3 --compress topk:ratio=0.01
same "topk, 3 workers" 4 --compress topk:ratio=0.01
same "dgc, 2 servers, 64 KiB chunks" 4 --servers 2 --chunk-bytes 64K --compress dgc:ratio=0.01
same "randomk fp16 values" 3 --compress randomk:ratio=0.05,values=fp16
same "randomk, 4 workers, 2 servers" 6 --servers 2 --compress randomk:ratio=0.05
same "allreduce" 2 --mode allreduce --compress none

# Priority order: chunks travel front layer first or in hand-over order, to the same bits.
# Small chunks and 2 servers give each worker and server many chunks to order.
prio() { # NAME NP FLAGS...
    local name=$1 np=$2; shift 2
    same_as "$name" "$np" "--priority forward" "--priority fifo" "$@"
}
prio "topk, 3 workers, 2 servers, 4 KiB chunks" 5 --servers 2 --chunk-bytes 4K --compress topk:ratio=0.01
prio "dgc, 2 workers, inline" 3 --chunk-bytes 4K --compress dgc:ratio=0.01 --pipeline off

# --update workers: pc_optim_step on the workers on the mean gradient the servers pushed, the
# servers' own step on it otherwise: the same bits. pc_example --save first checks every
# worker's parameters against worker 0's. One pipeline setting each (the servers' side is
# checked on and off above); 3 workers, so that the summation order shows.
upd() { # NAME PIPELINE FLAGS...
    local name=$1 pipe=$2; shift 2
    for u in servers workers; do
        "$run" -t 120 -np 4 "$ex" --iters 10 "$@" --update "$u" --pipeline "$pipe" \
            --save "$tmp/u-$u.bin" >"$tmp/u-$u.log" 2>&1 || { bad "--update $u $name: failed"; tail -n 3 "$tmp/u-$u.log"; return; }
    done
    cmp -s "$tmp/u-servers.bin" "$tmp/u-workers.bin" \
        && ok "--update workers == servers, $name, --pipeline $pipe, every worker alike" \
        || bad "--update workers != servers, $name, --pipeline $pipe"
}
upd "sgd momentum 0.9, none" on --compress none --momentum 0.9 --weight-decay 0.001
upd "topk (error feedback, momentum correction)" off --compress topk:ratio=0.01
# Dense moments given: top-k's default on the servers is lazy, which a step on the workers
# (on the dense mean) cannot be; warmup=0: AdamW's default dense=1000 (v frozen after it on
# the servers only) would leave these 10 iterations uncompressed.
upd "adamw, topk (error feedback)" on --compress topk:ratio=0.01,momentum=0,warmup=0 --optimizer adamw \
    --adam-moments dense --lr 0.003 --weight-decay 0.01
if out=$("$run" -t 60 -np 5 "$mpi" exact --servers 2 --chunk-bytes 256 --update workers \
         --compress none --momentum 0 --lr 0.5 2>&1) && grep -q 'match bit for bit' <<<"$out"; then
    ok "exact aggregation, --update workers, 3 workers, 2 servers"
else
    bad "exact aggregation, --update workers"; echo "$out" | tail -5
fi

# --compress-min-bytes: chunks under it travel uncompressed. With a bound above every
# chunk, top-k never runs: the result is the uncompressed run's (servers' momentum 0.9),
# bit for bit, whether the momentum is the servers' (topk:momentum=0 --momentum 0.9) or
# the workers' (the default topk:momentum=0.9, servers' --momentum 0: the servers then
# apply the codec's momentum to the uncompressed chunks themselves, which otherwise would
# train without any).
"$run" -t 120 -np 3 "$ex" --iters 15 --compress none --save "$tmp/none.bin" >/dev/null 2>&1 \
    || bad "--compress none run failed"
for spec in topk:ratio=0.01,momentum=0 topk:ratio=0.01; do
    "$run" -t 120 -np 3 "$ex" --iters 15 --compress "$spec" --compress-min-bytes 1G \
        --save "$tmp/min.bin" >/dev/null 2>&1 \
        && cmp -s "$tmp/min.bin" "$tmp/none.bin" \
        && ok "--compress $spec, --compress-min-bytes above every chunk == --compress none" \
        || bad "--compress $spec --compress-min-bytes 1G != --compress none"
done
"$run" -t 120 -np 3 "$ex" --iters 15 --compress topk:ratio=0.01 --compress-min-bytes 0 \
    --save "$tmp/min0.bin" >/dev/null 2>&1 && ! cmp -s "$tmp/min0.bin" "$tmp/none.bin" \
    && ok "--compress-min-bytes 0 compresses every chunk" || bad "--compress-min-bytes 0"

# Pull encodings.
for pull in dense sparse auto; do
    "$run" -t 120 -np 3 "$ex" --iters 25 --momentum 0 --compress topk:ratio=0.01 --pull "$pull" \
        --save "$tmp/pull-$pull.bin" >"$tmp/pull-$pull.log" 2>&1 || bad "--pull $pull run failed"
done
cmp -s "$tmp/pull-dense.bin" "$tmp/pull-sparse.bin" && cmp -s "$tmp/pull-dense.bin" "$tmp/pull-auto.bin" \
    && ok "--pull dense == sparse == auto" || bad "--pull encodings differ"

# PS without compression vs allreduce.
"$run" -t 120 -np 3 "$ex" --iters 20 --compress none --save "$tmp/ps.bin" >/dev/null 2>&1
"$run" -t 120 -np 2 "$ex" --iters 20 --mode allreduce --compress none --save "$tmp/ar.bin" >/dev/null 2>&1
if python3 - "$tmp/ps.bin" "$tmp/ar.bin" <<'PY'
import sys, array
a, b = array.array('f'), array.array('f')
a.frombytes(open(sys.argv[1], 'rb').read()); b.frombytes(open(sys.argv[2], 'rb').read())
assert len(a) == len(b) and len(a) > 0
worst = max(abs(x - y) / max(1e-3, abs(y)) for x, y in zip(a, b))
print("largest relative difference PS vs allreduce: %.3g" % worst)
sys.exit(0 if worst <= 1e-5 else 1)
PY
then ok "--compress none: PS matches allreduce within 1e-5"; else bad "PS vs allreduce beyond tolerance"; fi

# Empty messages.
if "$run" -t 60 -np 3 "$ex" --iters 10 --compress threshold:tau=1e30 >"$tmp/empty.log" 2>&1; then
    ok "empty messages (nothing above the threshold) complete"; else bad "empty-message run"; tail -n 3 "$tmp/empty.log"; fi

# Metrics.
"$run" -t 60 -np 3 "$ex" --iters 12 --pipeline off --metrics "$tmp/m.jsonl" >/dev/null 2>&1
if python3 - "$tmp/m.jsonl" <<'PY'
import sys, json
rows = [json.loads(l) for l in open(sys.argv[1])]
workers = [r for r in rows if r["role"] == "worker"]
servers = [r for r in rows if r["role"] == "server"]
assert len(workers) == 2 * 12 and len(servers) == 12, (len(workers), len(servers))
for r in workers:
    assert abs(r["t_exposed"] - r["t_compress"]) < 1e-6, r   # inline: all of it is exposed
    assert r["bytes_sent"] > 0 and r["dense_bytes"] > r["bytes_sent"]
PY
then ok "metrics: lines for every rank; inline exposed == compress"; else bad "metrics"; fi

# The breakdown (doc/api.md, Metrics), one definition in every mode. Values are printed
# with 6 decimals: sums are compared within the rounding of their terms.
breakdown() { # NAME FLAGS...
    local name=$1; shift
    "$run" -t 60 -np 3 "$ex" --iters 12 "$@" --metrics "$tmp/b.jsonl" >"$tmp/b.log" 2>&1 \
        || { bad "breakdown $name: run failed"; tail -n 3 "$tmp/b.log"; return; }
    if python3 - "$tmp/b.jsonl" "$@" <<'PY'
import sys, json
args = " ".join(sys.argv[2:])
inline, allreduce = "--pipeline off" in args, "allreduce" in args
rows = [json.loads(l) for l in open(sys.argv[1])]
workers = [r for r in rows if r["role"] == "worker"]
W = len({r["rank"] for r in workers})  # 2 with a server, 3 in allreduce mode
assert W == (3 if allreduce else 2) and len(workers) == W * 12, len(workers)
keys = ["t_wait_release", "t_wait_backpressure", "t_wait_compress", "t_wait_network",
        "t_wait_server", "t_compress_inline", "t_exposed", "t_compress", "t_param_wait"]
for r in workers:
    for k in keys:
        assert r[k] >= 0, (k, r)
    assert r["t_exposed"] <= r["t_compress"], r  # never more than the compression it measures
    # one compressor thread (or none, inline): the busiest thread's is the sum
    assert r["compressors"] == (0 if inline else 1) and r["t_compress_busy"] == r["t_compress"], r
    parts = r["t_wait_compress"] + r["t_wait_network"] + r["t_wait_server"]
    assert abs(parts - r["t_param_wait"]) <= 2e-6, r
    waits = r["t_param_wait"] + r["t_wait_release"] + r["t_wait_backpressure"] + r["t_compress_inline"]
    assert waits <= r["t_iteration"] + 3e-6, r  # the waits lie inside the iteration
    if inline:
        # compression ran on this thread, before any wait for its update
        assert r["t_wait_compress"] == 0 and r["t_wait_release"] == 0, r
        assert r["t_wait_backpressure"] == 0, r
        assert r["t_exposed"] == r["t_compress_inline"] == r["t_compress"], r
    else:
        assert r["t_compress_inline"] == 0, r
        exposed = min(r["t_compress"], r["t_wait_release"] + r["t_wait_backpressure"] + r["t_wait_compress"])
        assert abs(r["t_exposed"] - exposed) <= 2e-6, r
    if allreduce:  # nothing compressed: nothing exposed, no wait for compression
        assert r["t_compress"] == 0 and r["t_exposed"] == 0 and r["t_wait_compress"] == 0, r
PY
    then ok "breakdown $name: present, >= 0, exposed <= compress, parts sum to the update wait"
    else bad "breakdown $name"; fi
}
breakdown "pipelined" --compress topk:ratio=0.01
breakdown "inline" --compress topk:ratio=0.01 --pipeline off
breakdown "allreduce pipelined" --mode allreduce --compress none
breakdown "allreduce inline" --mode allreduce --compress none --pipeline off

# Malformed messages.
for kind in magic index truncated chunk; do
    out=$("$run" -t 60 -np 2 "$mpi" hostile "$kind" --compress topk:ratio=0.1 --compress-min-bytes 0 2>&1); rc=$?
    if [ "$rc" != 0 ] && grep -q "rejected message from worker r0" <<<"$out"; then
        ok "malformed message ($kind) rejected: $(grep -o 'rejected message from worker r0: .*' <<<"$out" | sed -n 1p)"
    else
        bad "malformed message ($kind) not rejected cleanly (rc $rc)"; echo "$out" | tail -3
    fi
done

# A rank killed mid-run: the job ends (error or abort), well within its limit.
start=$(date +%s)
"$run" -t 90 -np 3 "$ex" --iters 100000000 --timeout 10 >"$tmp/kill.log" 2>&1 &
job=$!
for _ in $(seq 50); do grep -q '^iter ' "$tmp/kill.log" && break; sleep 0.2; done
# One of this job's ranks (not mpirun or timeout), found from the launcher's pid.
victim=$(pc_ranks "$job" "$ex" 3 | sed -n 2p)
[ -n "$victim" ] && kill -9 "$victim"
wait "$job"; rc=$?
took=$(( $(date +%s) - start ))
if [ -n "$victim" ] && [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$took" -lt 60 ]; then
    ok "killed rank: job ended in ${took}s (rc $rc)"
else
    bad "killed rank: rc $rc after ${took}s (victim '${victim}')"; tail -5 "$tmp/kill.log"
fi

# A hung server (SIGSTOP): workers give up after --timeout with a message naming the wait.
start=$(date +%s)
"$run" -t 90 -np 3 "$ex" --iters 100000000 --timeout 3 >"$tmp/hang.log" 2>&1 &
job=$!
for _ in $(seq 50); do grep -q '^iter ' "$tmp/hang.log" && break; sleep 0.2; done
server=$(pc_ranks "$job" "$ex" 3 | tail -n 1)
[ -n "$server" ] && kill -STOP "$server"
wait "$job"; rc=$?
took=$(( $(date +%s) - start ))
[ -n "$server" ] && kill -KILL "$server" 2>/dev/null
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -q 'timed out after 3 s waiting for' "$tmp/hang.log"; then
    ok "hung server: $(grep -o 'timed out after 3 s waiting for[^(]*' "$tmp/hang.log" | sed -n 1p)(${took}s)"
else
    bad "hung server: rc $rc after ${took}s"; tail -5 "$tmp/hang.log"
fi

# SIGTERM to every rank (what Slurm does): all stop at one iteration boundary, cleanly.
"$run" -t 90 -np 3 "$ex" --iters 100000000 >"$tmp/term.log" 2>&1 &
job=$!
for _ in $(seq 50); do grep -q '^iter ' "$tmp/term.log" && break; sleep 0.2; done
ranks=$(pc_ranks "$job" "$ex" 3)
# shellcheck disable=SC2086
[ -n "$ranks" ] && kill -TERM $ranks
wait "$job"; rc=$?
if grep -q 'stopped by a signal' "$tmp/term.log" && [ "$rc" != 124 ]; then
    ok "SIGTERM: clean stop ($(grep -o 'after [0-9]* iterations' "$tmp/term.log"), rc $rc)"
else
    bad "SIGTERM: no clean stop (rc $rc)"; tail -5 "$tmp/term.log"
fi

pc_done

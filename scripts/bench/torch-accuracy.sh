#!/usr/bin/env bash
# torch-accuracy.sh: time to accuracy against torch's own hooks. One model of
# apps/examples/torch_train.py trained on Fashion-MNIST for the same epochs, seed, batch,
# learning rate and schedule by each setting, one after the other, 2 workers (and 1 server
# for PipeCompress), on shared memory, the test set evaluated after every epoch:
#   ddp             DDP, gloo, fp32 allreduce
#   ddp-fp16        DDP + fp16_compress_hook
#   ddp-psgd2       DDP + powerSGD_hook, rank 2 (error feedback and warm start on, plain
#                   allreduce for the first 10 iterations: the hook's documented example)
#   ddp-psgd4       the same at rank 4
#   ps-none         PipeCompress --mode ps --compress none, pipelined
#   ps-topk         PipeCompress --compress topk:ratio=0.01, pipelined (the codec's default
#                   momentum: DGC's correction on the workers, plain SGD on the servers;
#                   what --mode auto chooses for ResNet-18 and the ViT at 1 Gbit/s per node,
#                   its "ps-topk-pipelined")
#   ps-dgc          PipeCompress --compress dgc:ratio=0.001, pipelined
#   ps-dgc-warm     the same with DGC's density warm-up over the first epoch (the paper's
#                   schedule: warmup=E, E the iterations of one epoch, the density falling
#                   exponentially from 0.1 % ^ (1/E) to 0.1 %)
#   ps-psgd2        PipeCompress --compress powersgd:rank=2,warmup=10, pipelined (dense for
#                   the same first 10 iterations as ddp-psgd2)
#   ps-psgd4        the same at rank 4 (beside ddp-psgd4)
#   auto            PipeCompress --mode auto --servers 1 (the probe chooses)
# --study adam (issue 47, item 3: what the servers' Adam should do with a compressed
# aggregate) runs another table instead, every run AdamW (the example's --optimizer adamw:
# its no-decay group, warm-up and cosine through torch's schedulers; lr 1e-3, weight decay
# 0.05, warm-up over 5 % of the run, clipped to a global norm of 1), codecs without
# momentum correction (it would feed Adam's moments):
#   ddp             DDP + torch.optim.AdamW, fp32 (the reference: the "vs DDP" column)
#   ps-none         PipeCompress --compress none, AdamW on the servers
#   default         the default codec (no --compress: topk:ratio=0.01; with Adam on the
#                   servers its momentum correction off and a density warm-up over the
#                   first 1000 iterations, PC_CONFIG_ADAM_WARMUP), dense moments
#   CODEC-dense     Adam's dense moments on the aggregate (the servers' default), no warm-up
#   CODEC-ams       AMSGrad's max (the example's --amsgrad: AdamW(amsgrad=True))
#   CODEC-lazy      --adam-moments lazy (only the entries that arrived step)
#   CODEC-freeze    --adam-freeze-after N (1-bit Adam's warm-up, then a frozen v; N from
#                   --freeze-after, default a fifth of the run's iterations)
#   CODEC-wdense    the codec's density warm-up over those N iterations (warmup=N: from
#                   nearly dense down to its ratio, exponentially), dense moments
#   CODEC-wlazy     the density warm-up, then --adam-moments lazy
#   CODEC-wfreeze   the density warm-up and v frozen after the same N: 1-bit Adam's recipe
#                   (v learnt while nearly everything travels, then fixed, which makes the
#                   step linear in the aggregate, as error feedback assumes)
#   CODEC-wams      the density warm-up, then AMSGrad's max (COMP-AMS's server step: v
#                   never shrinks, so an entry's late, accumulated arrival moves it less)
#   CODEC-dfreeze   1-bit Adam's recipe as published: the first N iterations dense (dense=N:
#                   every entry travels), then the ratio at once with v frozen after N
# for CODEC topk (topk:ratio=0.01,momentum=0) and dgc (dgc:ratio=0.001,momentum=0); and
#   psgd4-dense     PowerSGD rank 4 (powersgd:rank=4,warmup=10, torch's hook's example
#                   start), Adam's dense moments (the matrices' gradient P^ Q^T is dense)
#   psgd4-freeze    the same, v frozen after N
#   psgd4-wdense    PowerSGD rank 4 dense for the first N iterations (warmup=N: torch's
#                   start_powerSGD_iter, whose default is 1000), dense moments
#   ddp-psgd4       DDP + powerSGD_hook rank 4 (start 10) + AdamW: the peer's figure
#   ddp-psgd4-w     the same with start_powerSGD_iter N (beside psgd4-wdense)
# then a table of the final accuracies, codec by variant. With a sparsifier a frozen v may
# diverge (an entry that never arrived in the warm-up keeps v = 0): such a run shows as
# failed.
# --study adadelta (issue 47, item 4: any torch optimizer, stepped on every worker) runs
# pytorch/examples' MNIST recipe instead (torch.optim.Adadelta, lr 1, StepLR's gamma 0.7 at
# every epoch's end; the example's --optimizer adadelta, update="workers"):
#   ddp             DDP + torch.optim.Adadelta, fp32 (the reference)
#   ps-topk         PipeCompress --compress topk:ratio=0.01 (the default codec; the wrapper
#                   turns its momentum correction off), every worker steps
#   ps-none         PipeCompress --compress none, every worker steps
#   ps-topk-warm    ps-topk with the density warm-up over a fifth of the run (warmup=N)
# Accuracy does not depend on the network (every setting is deterministic in its seed):
# these runs are made where they are cheapest; scripts/bench/torch_accuracy_report.py puts
# them on the wall-clock axis of a network with the per-node runs' measured rates
# (torch-ddp.sh's summary.json, --speed).
#
#   scripts/bench/torch-accuracy.sh [--arch A] [--epochs E] [--train-samples N]
#                                   [--settings "ddp ps-topk ..."] [--threads N]
#                                   [--data DIR|synthetic] [--speed SUMMARY.json]
#                                   [--timeout SECONDS] [--out DIR]
#                                   [--study adam|adadelta] [--freeze-after N] [--seed S]
#
# --arch: the example's (default vit). --epochs: default 2. --train-samples: train on the
# training set's first N samples (the example's flag: shorter epochs for the models that
# take hours per epoch on a small machine; the whole test set is evaluated). --settings:
# default all of the above. --threads: torch's and OpenBLAS's threads per rank (default 1).
# --data: as torch-ddp.sh's. --speed: a torch-ddp.sh summary.json of the same arch, for the
# report's wall-clock chart. --timeout: each run's limit (default 86400 s).
# --study adam: the table of Adam variants above instead (--settings picks among its
# names; default DIR results/torch-adam-study-accuracy-ARCH-DATE, and DIR/adam-study.txt,
# printed, the codec-by-variant table). --freeze-after N: its CODEC-freeze runs' N and
# its warm-ups' W (default a fifth of the run's iterations).
# --study adadelta: that table instead (default DIR results/torch-adadelta-study-accuracy-
# ARCH-DATE); --freeze-after N: ps-topk-warm's W.
# --seed S: every run's seed (default 1: the runs committed so far); a close call between
# two settings is a matter of more seeds, each a run of every setting compared.
# The library: $PIPECOMPRESS_LIB when set (nothing is built), else build/ (built here).
# Writes DIR/runs/SETTING.log (each run's whole output, its command on the first line) and
# SETTING.meta.json, DIR/accuracy.txt (printed) and accuracy.json, and with --speed the
# chart DIR/accuracy-time-NET.png per network of that summary. Default DIR:
# results/torch-accuracy-ARCH-DATE. Exit status: 0; 1 when a run failed; 2 for a bad flag.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"

usage_error() {
    echo "torch-accuracy.sh: $* (see --help)" >&2
    exit 2
}
count() {
    case $2 in *[!0-9]*|"") usage_error "$1: '$2' is not a number" ;; esac
    [ "$2" -ge "$3" ] || usage_error "$1: $2 is below $3"
}

# NAME|RANKS|LABEL|the example's flags
SETTINGS_TABLE="ddp|2|DDP fp32|--backend ddp
ddp-fp16|2|DDP + fp16 hook|--backend ddp --ddp-hook fp16
ddp-psgd2|2|DDP + PowerSGD rank 2|--backend ddp --ddp-hook powersgd --powersgd-rank 2
ddp-psgd4|2|DDP + PowerSGD rank 4|--backend ddp --ddp-hook powersgd --powersgd-rank 4
ps-none|3|ps, none, pipelined|--mode ps --compress none --pipeline on
ps-topk|3|ps, topk 1%, pipelined|--mode ps --compress topk:ratio=0.01 --pipeline on
ps-dgc|3|ps, dgc 0.1%, pipelined|--mode ps --compress dgc:ratio=0.001 --pipeline on
ps-dgc-warm|3|ps, dgc 0.1%, warm-up 1 ep|--mode ps --compress dgc:ratio=0.001,warmup=@EPOCH@ --pipeline on
ps-psgd2|3|ps, PowerSGD rank 2|--mode ps --compress powersgd:rank=2,warmup=10 --pipeline on
ps-psgd4|3|ps, PowerSGD rank 4|--mode ps --compress powersgd:rank=4,warmup=10 --pipeline on
auto|3|--mode auto|--mode auto --servers 1"
# --study adam's table (every run AdamW; @FREEZE@: --freeze-after's N). ADAM: the recipe
# of every run: a transformer's usual AdamW (lr 1e-3, weight decay 0.05 but on biases and
# norm weights, betas 0.9, 0.999), a linear warm-up over the first 5 % of the run
# (@WARM@) then the cosine, gradients clipped to a global norm of 1.
ADAM="--optimizer adamw --lr 0.001 --weight-decay 0.05 --lr-warmup @WARM@ --clip-grad-norm 1"
# warmup=0: without the density warm-up the servers' Adam gives a sparsifier by default.
ADAM_TOPK="--mode ps --compress topk:ratio=0.01,momentum=0,warmup=0 --pipeline on"
ADAM_DGC="--mode ps --compress dgc:ratio=0.001,momentum=0,warmup=0 --pipeline on"
ADAM_TOPK_W="--mode ps --compress topk:ratio=0.01,momentum=0,warmup=@FREEZE@ --pipeline on"
ADAM_DGC_W="--mode ps --compress dgc:ratio=0.001,momentum=0,warmup=@FREEZE@ --pipeline on"
ADAM_TOPK_D="--mode ps --compress topk:ratio=0.01,momentum=0,dense=@FREEZE@ --pipeline on"
ADAM_DGC_D="--mode ps --compress dgc:ratio=0.001,momentum=0,dense=@FREEZE@ --pipeline on"
ADAM_PSGD4="--mode ps --compress powersgd:rank=4,warmup=10 --pipeline on"
ADAM_TABLE="ddp|2|DDP + AdamW fp32|--backend ddp $ADAM
ps-none|3|ps, none, AdamW|--mode ps --compress none --pipeline on $ADAM
default|3|default codec, AdamW|--mode ps --pipeline on $ADAM
topk-dense|3|topk 1%, Adam dense|$ADAM_TOPK $ADAM
topk-ams|3|topk 1%, AMSGrad|$ADAM_TOPK $ADAM --amsgrad
topk-lazy|3|topk 1%, lazy moments|$ADAM_TOPK $ADAM --adam-moments lazy
topk-freeze|3|topk 1%, v frozen|$ADAM_TOPK $ADAM --adam-freeze-after @FREEZE@
topk-wdense|3|topk 1%, density warm-up|$ADAM_TOPK_W $ADAM
topk-wlazy|3|topk 1%, warm-up, lazy moments|$ADAM_TOPK_W $ADAM --adam-moments lazy
topk-wfreeze|3|topk 1%, warm-up, v frozen|$ADAM_TOPK_W $ADAM --adam-freeze-after @FREEZE@
topk-wams|3|topk 1%, warm-up, AMSGrad|$ADAM_TOPK_W $ADAM --amsgrad
topk-dfreeze|3|topk 1%, dense N, v frozen|$ADAM_TOPK_D $ADAM --adam-freeze-after @FREEZE@
dgc-dense|3|dgc 0.1%, Adam dense|$ADAM_DGC $ADAM
dgc-ams|3|dgc 0.1%, AMSGrad|$ADAM_DGC $ADAM --amsgrad
dgc-lazy|3|dgc 0.1%, lazy moments|$ADAM_DGC $ADAM --adam-moments lazy
dgc-freeze|3|dgc 0.1%, v frozen|$ADAM_DGC $ADAM --adam-freeze-after @FREEZE@
dgc-wdense|3|dgc 0.1%, density warm-up|$ADAM_DGC_W $ADAM
dgc-wlazy|3|dgc 0.1%, warm-up, lazy moments|$ADAM_DGC_W $ADAM --adam-moments lazy
dgc-wfreeze|3|dgc 0.1%, warm-up, v frozen|$ADAM_DGC_W $ADAM --adam-freeze-after @FREEZE@
dgc-wams|3|dgc 0.1%, warm-up, AMSGrad|$ADAM_DGC_W $ADAM --amsgrad
dgc-dfreeze|3|dgc 0.1%, dense N, v frozen|$ADAM_DGC_D $ADAM --adam-freeze-after @FREEZE@
psgd4-dense|3|PowerSGD rank 4, Adam dense|$ADAM_PSGD4 $ADAM
psgd4-freeze|3|PowerSGD rank 4, v frozen|$ADAM_PSGD4 $ADAM --adam-freeze-after @FREEZE@
psgd4-wdense|3|PowerSGD rank 4, dense for N|--mode ps --compress powersgd:rank=4,warmup=@FREEZE@ --pipeline on $ADAM
ddp-psgd4|2|DDP + PowerSGD rank 4 + AdamW|--backend ddp --ddp-hook powersgd --powersgd-rank 4 $ADAM
ddp-psgd4-w|2|DDP + PowerSGD 4 (start N)|--backend ddp --ddp-hook powersgd --powersgd-rank 4 --powersgd-start @FREEZE@ $ADAM"
# --study adadelta's table (issue 47: any torch optimizer on the workers): pytorch/examples'
# MNIST recipe (torch.optim.Adadelta at lr 1, the rate times 0.7 at every epoch's end).
ADADELTA="--optimizer adadelta --lr 1 --lr-schedule step --lr-gamma 0.7"
ADADELTA_TABLE="ddp|2|DDP + Adadelta fp32|--backend ddp $ADADELTA
ps-topk|3|topk 1%, Adadelta on workers|--mode ps --compress topk:ratio=0.01 --pipeline on $ADADELTA
ps-none|3|none, Adadelta on workers|--mode ps --compress none --pipeline on $ADADELTA
ps-topk-warm|3|topk 1%, warm-up, Adadelta|--mode ps --compress topk:ratio=0.01,warmup=@FREEZE@ --pipeline on $ADADELTA"
field() { awk -F'|' -v n="$1" -v k="$2" '$1 == n { print $k }' <<<"$SETTINGS_TABLE"; }
names() { awk -F'|' '{ printf "%s%s", sep, $1; sep = " " }' <<<"$SETTINGS_TABLE"; }
ALL=$(names)
arch=vit
epochs=2
samples=""
settings=$ALL
threads=1
data=/usr/share/datasets/fashion-mnist
speed=""
limit=86400
out=""
study=""
freeze=""
seed=1
settings_given=""
while [ $# -gt 0 ]; do
    case $1 in
    --arch) pc_need "$1" "${2:-}"; arch=$2; shift ;;
    --epochs) pc_need "$1" "${2:-}"; epochs=$2; shift ;;
    --train-samples) pc_need "$1" "${2:-}"; samples=$2; shift ;;
    --settings) pc_need "$1" "${2:-}"; settings=$2; settings_given=1; shift ;;
    --threads) pc_need "$1" "${2:-}"; threads=$2; shift ;;
    --data) pc_need "$1" "${2:-}"; data=$2; shift ;;
    --speed) pc_need "$1" "${2:-}"; speed=$2; shift ;;
    --timeout) pc_need "$1" "${2:-}"; limit=$2; shift ;;
    --out) pc_need "$1" "${2:-}"; out=$2; shift ;;
    --study) pc_need "$1" "${2:-}"; study=$2; shift ;;
    --freeze-after) pc_need "$1" "${2:-}"; freeze=$2; shift ;;
    --seed) pc_need "$1" "${2:-}"; seed=$2; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
    esac
    shift
done
case " cnn lstm resnet18 resnet50 vgg16 vit " in *" $arch "*) ;;
    *) usage_error "--arch: '$arch' is not one of cnn lstm resnet18 resnet50 vgg16 vit" ;; esac
case $study in
    "") ;;
    adam) SETTINGS_TABLE=$ADAM_TABLE; ALL=$(names); [ -n "$settings_given" ] || settings=$ALL ;;
    adadelta) SETTINGS_TABLE=$ADADELTA_TABLE; ALL=$(names)
        [ -n "$settings_given" ] || settings=$ALL ;;
    *) usage_error "--study: '$study' is not adam or adadelta" ;;
esac
[ -z "$freeze" ] || [ -n "$study" ] || usage_error "--freeze-after needs --study adam or adadelta"
[ -z "$freeze" ] || count --freeze-after "$freeze" 1
for s in $settings; do
    case " $ALL " in *" $s "*) ;; *) usage_error "--settings: unknown setting '$s' ($ALL)" ;; esac
done
[ -n "${settings// /}" ] || usage_error "--settings: none"
count --epochs "$epochs" 1
count --seed "$seed" 0
count --threads "$threads" 1
count --timeout "$limit" 1
[ -z "$samples" ] || count --train-samples "$samples" 1
[ -z "$speed" ] || [ -f "$speed" ] || usage_error "--speed: no file $speed"
[ "$data" = synthetic ] || [ -d "$data" ] ||
    usage_error "--data: no directory $data (Debian package dataset-fashion-mnist)"
out=${out:-$PC_TOP/results/torch-${study:+$study-study-}accuracy-$arch-$(date +%Y-%m-%d)}

pc_setup
py=/usr/bin/python3
# A --speed summary the report cannot use is said now, not after hours of runs.
if [ -n "$speed" ]; then
    msg=$("$py" "$PC_TOP/scripts/bench/torch_accuracy_report.py" --check-speed "$speed" "$arch" 2>&1) ||
        usage_error "${msg#torch_accuracy_report.py: }"
fi
pc_torch_prereqs "$py"
example="$PC_TOP/apps/examples/torch_train.py"
runs="$out/runs"
mkdir -p "$runs"
for s in $settings; do rm -f "$runs/$s.log" "$runs/$s.meta.json"; done

port=$((29800 + $$ % 3000 * 4))
failures=0
commit=$(git -C "$PC_TOP" rev-parse --short HEAD 2>/dev/null || echo unknown)
pc_say "$arch, $epochs epoch(s)${samples:+ of the first $samples training samples}, 2 workers x batch 32, seed $seed; runs in $runs"
# One epoch's iterations (2 workers x batch 32) for @EPOCH@: the training set's 60 000
# images, or the example's 20 000 synthetic ones, or --train-samples.
epoch_iters=$(( ${samples:-$([ "$data" = synthetic ] && echo 20000 || echo 60000)} / 64 ))
# --study adam's --adam-freeze-after: a fifth of the run by default (1-bit Adam's warm-up
# is of that order: 15 to 25 %), at least 1.
[ -n "$freeze" ] || freeze=$(( epoch_iters * epochs / 5 > 0 ? epoch_iters * epochs / 5 : 1 ))
for s in $settings; do
    np=$(field "$s" 2)
    flags=$(field "$s" 4)
    flags=${flags//@EPOCH@/$epoch_iters}
    flags=${flags//@FREEZE@/$freeze}
    flags=${flags//@WARM@/$(( epoch_iters * epochs / 20 > 0 ? epoch_iters * epochs / 20 : 1 ))}
    # shellcheck disable=SC2206 # the table's words
    cmd=("$py" "$example" --arch "$arch" --data "$data" --epochs "$epochs" --threads "$threads"
         --batch 32 --seed "$seed" --eval epoch ${samples:+--train-samples "$samples"} $flags)
    if [[ $(field "$s" 4) == *"--backend ddp"* ]]; then # a new rendezvous port per run
        cmd+=(--ddp-port "$port")
        port=$((port + 1))
    fi
    line="env OMPI_MCA_btl=self,vader scripts/pc-mpirun.sh -t $limit -np $np ${cmd[*]#"$PC_TOP"/}"
    echo "\$ $line" >"$runs/$s.log"
    printf '== %-15s %-24s ' "$s" "$(field "$s" 3)"
    failed=""
    t0=$(date +%s%N)
    env OMPI_MCA_btl=self,vader "$PC_TOP/scripts/pc-mpirun.sh" -t "$limit" -np "$np" "${cmd[@]}" \
        >>"$runs/$s.log" 2>&1 || failed="exit status $?"
    t1=$(date +%s%N)
    acc=$(sed -n 's/^done: .*final test accuracy \([0-9.]*\)%.*/\1/p' "$runs/$s.log" | tail -n 1)
    [ -z "$failed" ] && [ -z "$acc" ] && failed="no final accuracy in its done: line"
    if [ -n "$failed" ]; then
        failures=$((failures + 1))
        printf '%6d s failed (%s)\n' $(( (t1 - t0) / 1000000000 )) "$failed"
        tail -n 3 "$runs/$s.log" >&2
    else
        printf '%6d s %s %%\n' $(( (t1 - t0) / 1000000000 )) "$acc"
    fi
    "$py" -c 'import json,sys; a=sys.argv; json.dump({"setting": a[1], "label": a[2], "np": int(a[3]), "arch": a[4], "epochs": int(a[5]), "train_samples": int(a[6]) if a[6] else None, "threads": int(a[7]), "wall_s": int(a[8]) / 1e9, "failed": a[9] or None, "commit": a[10], "command": a[11], "seed": int(a[13])}, open(a[12], "w"), indent=1)' \
        "$s" "$(field "$s" 3)" "$np" "$arch" "$epochs" "$samples" "$threads" $((t1 - t0)) \
        "$failed" "$commit" "$line" "$runs/$s.meta.json" "$seed"
done
report=0
"$py" "$PC_TOP/scripts/bench/torch_accuracy_report.py" "$runs" "$out" ${speed:+--speed "$speed"} || report=$?
if [ "$study" = adam ] && [ -f "$out/accuracy.json" ]; then
    # The final accuracies side by side, codec by Adam variant (- where not run), and each
    # one's points against DDP + AdamW; also DIR/adam-study.txt.
    "$py" - "$out/accuracy.json" "$freeze" <<'PY' | tee "$out/adam-study.txt"
import json, sys
runs = {r["setting"]: r for r in json.load(open(sys.argv[1]))["runs"]}
fin = lambda s: runs[s]["final"] if s in runs and runs[s]["final"] is not None else None
cell = lambda a: "%7.2f" % a if a is not None else "%7s" % "-"
ddp = fin("ddp")
print("final test accuracy %% (AdamW; v frozen and density warm-up over %s iterations); "
      "DDP + AdamW %s, "
      "ps none %s" % (sys.argv[2], cell(ddp).strip(), cell(fin("ps-none")).strip()))
cols = ("dense", "ams", "lazy", "freeze", "wdense", "wlazy", "wfreeze", "wams", "dfreeze")
print("%-8s %s   %s" % ("codec", " ".join("%7s" % c for c in cols),
                         " ".join("%7s" % ("d " + c) for c in cols)))
for codec in ("topk", "dgc", "psgd4"):  # psgd4's wdense: dense for the first N
    acc = [fin("%s-%s" % (codec, c)) for c in cols]
    diff = ["%+7.2f" % (a - ddp) if a is not None and ddp is not None else "%7s" % "-"
            for a in acc]
    print("%-8s %s   %s" % (codec, " ".join(cell(a) for a in acc), " ".join(diff)))
for s, what in (("default", "the default codec (with Adam: warm-up over 1000 iterations)"),
                ("ddp-psgd4", "DDP + powerSGD_hook rank 4 + AdamW"),
                ("ddp-psgd4-w", "DDP + powerSGD_hook rank 4 (start %s) + AdamW" % sys.argv[2])):
    if fin(s) is not None:
        print("%s %s%s" % (what, cell(fin(s)).strip(),
                           " (%+.2f)" % (fin(s) - ddp) if ddp is not None else ""))
print("d VARIANT: points against DDP + AdamW")
PY
fi
if [ "$failures" -gt 0 ] || [ "$report" != 0 ]; then
    pc_say "$failures run(s) failed (their logs: $runs)"
    exit 1
fi

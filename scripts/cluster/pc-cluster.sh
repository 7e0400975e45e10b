#!/usr/bin/env bash
# pc-cluster.sh: emulated nodes on one machine, for multi-node runs without a cluster.
# Each node has its own network namespace (eth0 with its own address, on a veth pair to a
# bridge in the root namespace), its own UTS namespace (hostname), its own link shaped by
# tc in both directions (rate, delay, loss), and, where the machine has enough cores, its
# own cores. Open MPI starts its daemons into the nodes through a launch agent (no ssh);
# Slurm runs a slurmd (and a munged) per node with slurmctld beside the bridge.
#
#   pc-cluster.sh up DIR [--nodes N] [--link RATE[,DELAY[,LOSS]]] [--cores split|shared]
#                                    [--name PREFIX]
#       create N nodes (default 2) named PREFIX0..PREFIX(N-1) (default "node"); record every
#       name it creates in DIR (created; must not hold a cluster already). RATE as tc
#       writes it (1gbit, 10gbit, 100mbit; "none": unshaped), DELAY one-way per direction
#       (e.g. 100us, 1ms; default 0; needs a kernel with netem), LOSS a percentage of
#       the packets each way (e.g. 1%; default 0; by nftables).
#       --cores split (default): node k's processes run on cores k*C..k*C+C-1, C = cores/N,
#       when every node gets at least one; otherwise (and with --cores shared) all nodes
#       share every core, and up says so.
#   pc-cluster.sh down DIR             stop Slurm if started, delete what up created (by the
#                                     names recorded in DIR); safe to run twice
#   pc-cluster.sh exec DIR NODE CMD... run CMD inside NODE (its network, hostname, cores)
#   pc-cluster.sh mpirun DIR [mpirun flags] PROGRAM [ARGS...]
#       Open MPI across the nodes: the launch agent, a hostfile of the nodes' addresses
#       (DIR/hostfile, slots = cores of the node, at least 1), TCP between nodes over the
#       shaped links, shared memory within a node, oversubscription allowed, --bind-to none
#       (PipeCompress binds its own threads), run as root allowed. Add --map-by node to
#       put consecutive ranks on consecutive nodes.
#   pc-cluster.sh link DIR NODE down|up            take NODE's link down or bring it back
#   pc-cluster.sh link DIR NODE shape RATE[,DELAY[,LOSS]]  reshape NODE's link
#   pc-cluster.sh kill DIR NODE [SIGNAL]           signal every process running in NODE
#   pc-cluster.sh slurm DIR start|stop  slurmctld in the root namespace and one slurmd and
#       munged per node (DIR/slurm/slurm.conf; export SLURM_CONF=DIR/slurm/slurm.conf).
#       Jobs get OMPI_MCA_* for TCP over the links from DIR/slurm/env (source it).
#   pc-cluster.sh info DIR             the nodes: name, address, interface, cores, link
#
# Needs root, iproute2 (ip, tc), util-linux (nsenter, unshare), and for slurm the Debian
# packages slurmctld slurmd slurm-client munge. Every process it starts is stopped by the
# pid it recorded; interfaces and namespaces are deleted by name. Only the namespaces and
# links it creates carry traffic. Recipes: doc/cluster.md.
set -Eeuo pipefail
. "$(dirname "$0")/../lib.sh" # pc_stop_pid
me=pc-cluster.sh
die() { echo "$me: $*" >&2; exit 1; }
# usage [PROBLEM]: the problem in one line (or, with none, the whole header: --help)
usage() {
    if [ -n "${1:-}" ]; then
        echo "$me: $1 (see: $me --help)" >&2
    else
        awk 'NR > 2 && /^#/ { sub(/^# ?/, ""); print; next } NR > 2 { exit }' "$0"
    fi
    exit 2
}
need_arg() { [ -n "${2:-}" ] || usage "$1"; } # need_arg MESSAGE VALUE

case ${1:-} in -h|--help|help) usage ;; "") usage "no command: up, down, info, exec, mpirun, link, kill or slurm" ;; esac
[ $# -ge 2 ] || usage "$1: needs the cluster's directory DIR"
cmd=$1
dir=$(realpath -m "$2")
shift 2

need_root() { [ "$(id -u)" = 0 ] || die "$cmd must run as root (it enters or changes network namespaces)"; }
need_tools() {
    local t
    for t in ip tc nsenter unshare taskset; do
        command -v "$t" >/dev/null || die "$t not found: apt-get install iproute2 util-linux"
    done
}

# The record of a cluster: DIR/cluster (shell variables) and DIR/nodes (one line a node:
# NAME ADDRESS NETNS UTSFILE HOSTVETH CORES).
load() {
    [ -f "$dir/cluster" ] || die "no cluster recorded in $dir (run: $me up $dir)"
    # shellcheck disable=SC1091
    . "$dir/cluster"
}
node_field() { # node_field NODE FIELD#: a field of NODE's line (NODE: name, index or address)
    local line
    line=$(awk -v n="$1" '$1 == n || $2 == n || ("#" NR - 1) == "#" n' "$dir/nodes" | sed -n 1p)
    [ -n "$line" ] || die "no node '$1' in $dir (nodes: $(awk '{printf "%s ", $1}' "$dir/nodes"))"
    echo "$line" | awk -v f="$2" '{print $f}'
}

# parse_link RATE[,DELAY[,LOSS]] -> sets l_rate l_delay l_loss, refusing what tc would not take
parse_link() {
    local spec=$1
    IFS=, read -r l_rate l_delay l_loss extra <<<"$spec"
    [ -z "${extra:-}" ] || die "--link '$spec': at most RATE,DELAY,LOSS"
    [[ $spec != *,,* && $spec != *, ]] || die "--link '$spec': an empty field (write 0 for no delay)"
    l_delay=${l_delay:-0}
    l_loss=${l_loss:-0}
    [[ $l_rate =~ ^(none|[0-9]+(\.[0-9]+)?([kmg]?bit|[kmg]?bps))$ ]] \
        || die "--link '$spec': rate '$l_rate' is not like 1gbit, 100mbit or none"
    [ "$l_rate" = none ] || awk -v r="$l_rate" 'BEGIN { exit !(r + 0 > 0) }' \
        || die "--link '$spec': rate '$l_rate' must be above zero"
    [[ $l_delay =~ ^(0|[0-9]+(\.[0-9]+)?(us|ms|s))$ ]] \
        || die "--link '$spec': delay '$l_delay' is not like 0, 100us or 2ms"
    [[ $l_loss =~ ^[0-9]+(\.[0-9]+)?%?$ ]] || die "--link '$spec': loss '$l_loss' is not like 1%"
    l_loss=${l_loss%\%}
    awk -v x="$l_loss" 'BEGIN { exit !(x >= 0 && x < 100) }' || die "--link '$spec': loss must be below 100%"
}
# rate_bits RATE: bits per second (for the token bucket's burst)
rate_bits() {
    awk -v r="$1" 'BEGIN {
        n = r + 0; u = substr(r, length(n "") + 1)
        m = 1; if (u ~ /^k/) m = 1e3; else if (u ~ /^m/) m = 1e6; else if (u ~ /^g/) m = 1e9
        if (u ~ /bps$/) m *= 8
        printf "%.0f", n * m }'
}
# shape DEV (runs in the current namespace): a token bucket for the rate (burst: 1 ms of
# the rate, at least 128 KiB so that a 64 KiB GSO segment fits) and, for a delay, netem
# above it. Loss is the node's (nft_loss), not the device's.
shape() {
    local dev=$1 burst parent=root
    tc qdisc del dev "$dev" root 2>/dev/null || true
    if [ "$l_delay" != 0 ]; then
        tc qdisc add dev "$dev" root handle 1: netem delay "$l_delay" limit 100000
        parent="parent 1:1"
    fi
    if [ "$l_rate" != none ]; then
        burst=$(($(rate_bits "$l_rate") / 8000))
        [ "$burst" -ge 131072 ] || burst=131072
        # shellcheck disable=SC2086
        tc qdisc add dev "$dev" $parent handle 10: tbf rate "$l_rate" burst "$burst" latency 50ms
    fi
}
# nft_loss (runs in a node's namespace): drop l_loss % of the packets leaving and entering
# eth0, at random (nftables: this kernel kind has no netem).
nft_loss() {
    nft delete table inet pcloss 2>/dev/null || true
    [ "$l_loss" != 0 ] || return 0
    local per100k
    per100k=$(awk -v x="$l_loss" 'BEGIN { printf "%d", x * 1000 + 0.5 }')
    nft -f - <<NFT
table inet pcloss {
    chain in { type filter hook input priority 0; iifname "eth0" numgen random mod 100000 < $per100k drop; }
    chain out { type filter hook output priority 0; oifname "eth0" numgen random mod 100000 < $per100k drop; }
}
NFT
}
# check_link: refuse a link this kernel cannot emulate, naming what is missing.
check_link() {
    if [ "$l_delay" != 0 ]; then
        ip netns add "pcprobe$$"
        if ! ip netns exec "pcprobe$$" tc qdisc add dev lo root netem delay 1ms 2>/dev/null; then
            ip netns del "pcprobe$$"
            die "--link delay $l_delay: this kernel has no netem qdisc, so no delay can be emulated (use RATE or RATE,0,LOSS)"
        fi
        ip netns del "pcprobe$$"
    fi
    if [ "$l_loss" != 0 ] && ! command -v nft >/dev/null; then
        die "--link loss $l_loss%: needs nft (apt-get install nftables)"
    fi
}
# shape_node NODE_NS HOST_VETH: shape both directions of a node's link and set its loss.
shape_node() {
    local ns=$1 veth=$2 fns
    shape "$veth"
    fns="$(declare -f shape rate_bits nft_loss); l_rate=$l_rate l_delay=$l_delay l_loss=$l_loss"
    ip netns exec "$ns" bash -c "$fns; shape eth0 && nft_loss"
}

# in_node NODE CMD...: run CMD in NODE's network and UTS namespaces on NODE's cores
in_node() {
    local n=$1 ns uts cores
    shift
    ns=$(node_field "$n" 3)
    uts=$(node_field "$n" 4)
    cores=$(node_field "$n" 6)
    if [ "$cores" = all ]; then
        nsenter --net="/run/netns/$ns" --uts="$uts" -- "$@"
    else
        taskset -c "$cores" nsenter --net="/run/netns/$ns" --uts="$uts" -- "$@"
    fi
}

cmd_up() {
    local nodes=2 link=none cores=split prefix=node
    while [ $# -gt 0 ]; do
        case $1 in
        --nodes) need_arg "--nodes needs a count" "${2:-}"; nodes=$2; shift 2 ;;
        --link) need_arg "--link needs RATE[,DELAY[,LOSS]]" "${2:-}"; link=$2; shift 2 ;;
        --cores) need_arg "--cores needs split or shared" "${2:-}"; cores=$2; shift 2 ;;
        --name) need_arg "--name needs a prefix" "${2:-}"; prefix=$2; shift 2 ;;
        *) die "up: unknown flag '$1' (see: $me)" ;;
        esac
    done
    [[ $nodes =~ ^[0-9]+$ ]] && [ "$nodes" -ge 1 ] && [ "$nodes" -le 64 ] \
        || die "--nodes '$nodes': a count from 1 to 64"
    [[ $prefix =~ ^[a-z][a-z0-9-]{0,11}$ ]] || die "--name '$prefix': lower-case letters, digits and -, at most 12"
    case $cores in split|shared) ;; *) die "--cores '$cores': split or shared" ;; esac
    parse_link "$link"
    need_root
    need_tools
    check_link
    [ ! -e "$dir" ] || [ -d "$dir" ] || die "$dir exists and is not a directory"
    [ ! -f "$dir/cluster" ] || die "$dir already records a cluster (run: $me down $dir)"
    mkdir -p "$dir"
    dir=$(realpath "$dir")

    # Unique names and a free /24: several clusters may be up on one machine.
    exec 9>/run/pc-cluster.lock
    flock 9
    local id sub i b
    id=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
    sub=""
    for i in $(seq 0 255); do
        b=$(( (0x${id:0:2} + i) % 200 + 40 ))
        if ! ip -4 -o addr show | grep " 10\.77\.$b\." >/dev/null; then sub=10.77.$b; break; fi
    done
    [ -n "$sub" ] || die "no free 10.77.X.0/24 subnet"
    local br=pcb$id
    {
        echo "id=$id"
        echo "bridge=$br"
        echo "subnet=$sub"
        echo "link=$link"
        echo "prefix=$prefix"
    } >"$dir/cluster"
    : >"$dir/nodes"
    # From here on, a failure tears down what exists.
    trap 'echo "$me: up failed; removing what was created" >&2; flock -u 9; "$0" down "$dir" >/dev/null 2>&1 || true' ERR
    ip link add "$br" type bridge
    ip addr add "$sub.1/24" dev "$br"
    ip link set "$br" up
    flock -u 9

    local ncpu per k name ns uts veth addr cset
    ncpu=$(nproc)
    per=$((ncpu / nodes))
    if [ "$cores" = split ] && [ "$per" -lt 1 ]; then
        echo "$me: $nodes nodes on $ncpu cores: the nodes share every core (oversubscribed)" >&2
    fi
    for k in $(seq 0 $((nodes - 1))); do
        name=$prefix$k
        ns=pc$id-$k
        uts=/run/uts-pc$id-$k
        veth=pcv$id$k
        addr=$sub.$((k + 10))
        if [ "$cores" = split ] && [ "$per" -ge 1 ]; then
            cset=$((k * per))-$((k * per + per - 1))
        else
            cset=all
        fi
        # Record before creating, so down finds a half-made node.
        echo "$name $addr $ns $uts $veth $cset" >>"$dir/nodes"
        ip netns add "$ns"
        touch "$uts"
        unshare --uts="$uts" hostname "$name"
        ip link add "$veth" type veth peer name "pcp$id$k"
        ip link set "$veth" master "$br" up
        ip link set "pcp$id$k" netns "$ns"
        ip -n "$ns" link set "pcp$id$k" name eth0
        ip -n "$ns" addr add "$addr/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
        ip -n "$ns" route add default via "$sub.1"
        shape_node "$ns" "$veth"
    done
    awk '{ n = $6; c = 1; if (n != "all") { split(n, a, "-"); c = a[2] - a[1] + 1 } else c = '"$ncpu"'; print $2 " slots=" c }' \
        "$dir/nodes" >"$dir/hostfile"
    write_agent
    trap - ERR
    echo "$me: $nodes nodes up (bridge $br, $sub.0/24, link $link):"
    cmd_info
}

# The launch agent Open MPI calls instead of ssh: AGENT HOST CMD...
write_agent() {
    cat >"$dir/agent" <<AGENT
#!/usr/bin/env bash
# Open MPI launch agent for the emulated cluster in $dir (written by pc-cluster.sh).
# Called as: agent [ssh-style flags] HOST COMMAND...; runs COMMAND inside HOST's node.
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1
shift
line=\$(awk -v h="\$host" '\$1 == h || \$2 == h' "$dir/nodes" | sed -n 1p)
if [ -z "\$line" ]; then
    echo "pc-cluster agent: no node '\$host' in $dir/nodes" >&2
    exit 1
fi
set -- "\$@"
read -r _name _addr ns uts _veth cores <<<"\$line"
if [ "\$cores" = all ]; then
    exec nsenter --net="/run/netns/\$ns" --uts="\$uts" -- sh -c "\$*"
fi
exec taskset -c "\$cores" nsenter --net="/run/netns/\$ns" --uts="\$uts" -- sh -c "\$*"
AGENT
    chmod +x "$dir/agent"
}

cmd_down() {
    [ -f "$dir/cluster" ] || { echo "$me: nothing recorded in $dir"; return 0; }
    load
    [ "$(id -u)" = 0 ] || die "must run as root (it deletes network namespaces)"
    if [ -d "$dir/slurm" ]; then
        cmd_slurm stop >/dev/null || true
        rm -rf "$dir/slurm"
    fi
    local name addr ns uts veth cset pid
    while read -r name addr ns uts veth cset; do
        # Processes still inside the node were started in it by us: stop them by pid.
        if [ -e "/run/netns/$ns" ]; then
            for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
            ip netns del "$ns" 2>/dev/null || true
        fi
        ip link del "$veth" 2>/dev/null || true
        if [ -e "$uts" ]; then umount "$uts" 2>/dev/null || true; rm -f "$uts"; fi
    done <"$dir/nodes"
    ip link del "$bridge" 2>/dev/null || true
    rm -f "$dir/cluster" "$dir/nodes" "$dir/hostfile" "$dir/agent"
    echo "$me: cluster in $dir removed"
}

cmd_info() {
    load
    local name addr ns uts veth cset
    printf '%-10s %-14s %-14s %-8s %s\n' node address interface cores link
    while read -r name addr ns uts veth cset; do
        printf '%-10s %-14s %-14s %-8s %s\n' "$name" "$addr" "$veth" "$cset" "$link"
    done <"$dir/nodes"
}

cmd_exec() {
    need_root
    load
    [ $# -ge 2 ] || die "usage: $me exec DIR NODE CMD..."
    local n=$1
    shift
    in_node "$n" "$@"
}

cmd_mpirun() {
    need_root
    load
    [ $# -ge 1 ] || die "usage: $me mpirun DIR [mpirun flags] PROGRAM [ARGS...]"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
    exec "${MPIRUN:-mpirun}" --mca plm_rsh_agent "$dir/agent" --hostfile "$dir/hostfile" \
        --mca oob_tcp_if_include "$subnet.0/24" --mca btl self,vader,tcp \
        --mca btl_tcp_if_include "$subnet.0/24" --oversubscribe --bind-to none \
        -x OMPI_MCA_mpi_yield_when_idle "$@"
}

cmd_link() {
    need_root
    load
    [ $# -ge 2 ] || die "usage: $me link DIR NODE down|up|shape RATE[,DELAY[,LOSS]]"
    local n=$1 what=$2 veth ns
    veth=$(node_field "$n" 5)
    ns=$(node_field "$n" 3)
    case $what in
    down) ip link set "$veth" down ;;
    up) ip link set "$veth" up ;;
    shape)
        need_arg "link shape needs RATE[,DELAY[,LOSS]]" "${3:-}"
        parse_link "$3"
        check_link
        shape_node "$ns" "$veth"
        ;;
    *) die "link: '$what' is not down, up or shape" ;;
    esac
}

cmd_kill() {
    need_root
    load
    [ $# -ge 1 ] || die "usage: $me kill DIR NODE [SIGNAL]"
    local ns sig=${2:-KILL} pid n=0
    kill -l "$sig" >/dev/null 2>&1 || die "kill: '$sig' is not a signal (kill -l lists them)"
    ns=$(node_field "$1" 3)
    # The node's network namespace holds only what was started in it (by the agent or
    # by slurmd): its pids are the node's processes. slurmd and munged are spared.
    local spare
    spare=" $(cat "$dir"/slurm/slurmd-*.pid /run/pc-cluster-"$id"/munge-*/munged.pid 2>/dev/null | tr '\n' ' ' || true) "
    for pid in $(ip netns pids "$ns"); do
        case $spare in *" $pid "*) continue ;; esac
        kill "-$sig" "$pid" 2>/dev/null && n=$((n + 1))
    done
    echo "$me: sent SIG$sig to $n process(es) in node $1"
}

cmd_slurm() {
    need_root
    load
    need_arg "slurm needs start or stop" "${1:-}"
    # The munge sockets live under /run (user munge must reach them, and a socket's path
    # is limited to 107 bytes): one directory for this cluster, removed by stop.
    local what=$1 s=$dir/slurm m=/run/pc-cluster-$id
    local name addr ns uts veth cset
    case $what in
    stop)
        [ -d "$s" ] || return 0
        while read -r name addr ns uts veth cset; do
            pc_stop_pid "$s/slurmd-$name.pid"
            pc_stop_pid "$m/munge-$name/munged.pid"
        done <"$dir/nodes"
        pc_stop_pid "$s/slurmctld.pid"
        pc_stop_pid "$m/munge-ctl/munged.pid"
        rm -rf "$m"
        echo "$me: Slurm of $dir stopped"
        ;;
    start)
        local b
        if [ -s "$s/slurmctld.pid" ] && kill -0 "$(cat "$s/slurmctld.pid")" 2>/dev/null; then
            die "Slurm already runs for $dir (pid $(cat "$s/slurmctld.pid")): $me slurm $dir stop first"
        fi
        for b in munged slurmctld slurmd sinfo; do
            command -v "$b" >/dev/null || [ -x "/usr/sbin/$b" ] \
                || die "$b not found: apt-get install --no-install-recommends slurmctld slurmd slurm-client munge"
        done
        # A fresh cluster each start: no jobs or node states from an earlier one.
        rm -rf "$s/state" "$s/spool"
        mkdir -p "$s/state" "$s/spool"
        local nodelist cpus ctl
        nodelist=$(awk '{printf "%s%s", (NR > 1 ? "," : ""), $1}' "$dir/nodes")
        ctl=$(hostname)
        {
            cat <<CONF
ClusterName=pc$id
SlurmctldHost=$ctl($subnet.1)
StateSaveLocation=$s/state
SlurmdSpoolDir=$s/spool/%n
SlurmctldPidFile=$s/slurmctld.pid
SlurmdPidFile=$s/slurmd-%n.pid
SlurmctldLogFile=$s/slurmctld.log
SlurmdLogFile=$s/slurmd-%n.log
SlurmctldPort=$((6900 + 0x${id:0:2} % 50 * 2))
SlurmdPort=$((6901 + 0x${id:0:2} % 50 * 2))
# This cluster's own munged (its socket below), not the machine's /run/munge: another
# cluster, or local-cluster.sh, may start and stop that one.
AuthInfo=cred_expire=10,socket=$m/munge-ctl/munge.socket.2
$(grep -v -e '^#' -e '^AuthInfo=' "$(dirname "$0")/../slurm/common.conf")
CONF
            while read -r name addr ns uts veth cset; do
                # Each node advertises 16 CPUs at least: jobs with 2 CPUs a task fit,
                # oversubscribed (the machine has 2 cores; say so in results).
                cpus=16
                echo "NodeName=$name NodeAddr=$addr CPUs=$cpus State=UNKNOWN"
            done <"$dir/nodes"
            echo "PartitionName=pc Nodes=$nodelist Default=YES MaxTime=INFINITE State=UP"
        } >"$s/slurm.conf"
        # PMIx's per-step directories must not collide between nodes sharing /tmp.
        echo "PMIxCliTmpDirBase=/run/pmix-tmp" >"$s/mpi.conf"
        {
            echo "export OMPI_MCA_btl=self,vader,tcp"
            echo "export OMPI_MCA_btl_tcp_if_include=$subnet.0/24"
            echo "export OMPI_MCA_oob_tcp_if_include=$subnet.0/24"
            echo "export OMPI_MCA_mpi_yield_when_idle=1"
            echo "export SLURM_CONF=$s/slurm.conf"
        } >"$s/env"
        [ -s /etc/munge/munge.key ] || { mungekey --create 2>/dev/null || /usr/sbin/create-munge-key -f; }
        # munged for the controller and the clients (root namespace): this cluster's own
        # socket (AuthInfo above). Each node runs its own munged at the same path, which
        # the node's mount namespace maps to its own directory.
        install -d -m 0755 "$m"
        install -d -o munge -g munge -m 0755 "$m/munge-ctl"
        runuser -u munge -- /usr/sbin/munged --socket="$m/munge-ctl/munge.socket.2" \
            --pid-file="$m/munge-ctl/munged.pid" --origin="$subnet.1" \
            || die "munged for the controller did not start"
        SLURM_CONF=$s/slurm.conf /usr/sbin/slurmctld -f "$s/slurm.conf" \
            || die "slurmctld did not start (see $s/slurmctld.log)"
        while read -r name addr ns uts veth cset; do
            install -d -o munge -g munge -m 0755 "$m/munge-$name"
            mkdir -p "$s/pmix-$name" "$s/spool/$name"
            local pin=""
            [ "$cset" = all ] || pin="taskset -c $cset"
            # A mount namespace per node: the munge socket's directory and /run/pmix-tmp
            # are the node's own.
            $pin nsenter --net="/run/netns/$ns" unshare --uts --mount --propagation private \
                sh -c "hostname $name && mkdir -p /run/pmix-tmp && mount --bind $m/munge-$name $m/munge-ctl \
                    && mount --bind $s/pmix-$name /run/pmix-tmp \
                    && runuser -u munge -- /usr/sbin/munged --socket=$m/munge-ctl/munge.socket.2 \
                        --pid-file=$m/munge-ctl/munged.pid --origin=$addr \
                    && SLURM_CONF=$s/slurm.conf /usr/sbin/slurmd -f $s/slurm.conf -N $name" \
                </dev/null >>"$s/start-$name.log" 2>&1 \
                || die "slurmd of $name did not start (see $s/start-$name.log, $s/slurmd-$name.log)"
        done <"$dir/nodes"
        local state _
        for _ in $(seq 150); do
            state=$(SLURM_CONF=$s/slurm.conf sinfo -h -o %t 2>/dev/null | sort -u | tr '\n' ' ')
            case $state in "idle "|"idle") echo "$me: Slurm up on $(wc -l <"$dir/nodes") node(s): . $s/env"; return 0 ;; esac
            sleep 0.2
        done
        die "the nodes did not become idle (state '${state:-none}'; see $s/*.log)"
        ;;
    *) die "slurm: '$what' is not start or stop" ;;
    esac
}

case $cmd in
up) cmd_up "$@" ;;
down) cmd_down ;;
info) cmd_info ;;
exec) cmd_exec "$@" ;;
mpirun) cmd_mpirun "$@" ;;
link) cmd_link "$@" ;;
kill) cmd_kill "$@" ;;
slurm) cmd_slurm "$@" ;;
*) usage ;;
esac

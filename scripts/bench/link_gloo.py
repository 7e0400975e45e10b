#!/usr/bin/env python3
"""link_gloo.py: what a link carries for torch.distributed's gloo backend, as
`pc-bench link` measures it for MPI (apps/bench_link.c), with the same output.

    mpirun -np N [--map-by node] python3 scripts/bench/link_gloo.py [--seconds S]
        [--bytes SIZE] [--depth N] [--json FILE]

N even: rank 2i streams to rank 2i+1, every pair at once. The sender keeps --depth
isend()s of a --bytes tensor in flight for --seconds; the receiver as many irecv()s posted.
A flow's rate is measured at its receiver (payload bytes from the common start, a barrier,
to its last data message); the total is every flow's bytes over the longest flow's time.
Rates in decimal units, as tc's "gbit".

The end of a flow: gloo's recv cannot take any tag, so every message carries its kind in
its first byte (1: data, 0: stop). After --seconds the sender sends --depth stop messages;
receives are posted and completed in ring order and matched in posting order, so the first
stop lands in the oldest posted receive and the other depth - 1 fill exactly the receives
still posted.

Rank and size come from Open MPI's launcher (OMPI_COMM_WORLD_RANK, _SIZE) or RANK and
WORLD_SIZE; the rendezvous from MASTER_ADDR (default 127.0.0.1) and MASTER_PORT (default
29511) or --port; GLOO_SOCKET_IFNAME picks the interface. Exit status: 0, 1 on a failure,
2 on bad usage (one line).
"""
import argparse
import json
import os
import re
import socket
import sys
import time

PROG = "link_gloo.py"


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, status 2 (pc-bench's style)
        sys.stderr.write("%s: %s\n" % (PROG, message))
        sys.exit(2)


def size_arg(text):
    """"4M", "64K", "1G", "4096" (binary units, as pc-bench's --bytes) -> bytes."""
    m = re.fullmatch(r"([0-9]+)([KMG]?)(i?B)?", text)
    if not m:
        raise argparse.ArgumentTypeError("'%s' is not a size like 4096, 64K or 4M" % text)
    n = int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]
    if not 2 <= n <= 1 << 30:
        raise argparse.ArgumentTypeError("%s is out of range (2..1073741824)" % text)
    return n


def seconds_arg(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("'%s' is not a number" % text) from None
    if not 0.25 <= v <= 3600:
        raise argparse.ArgumentTypeError("%s is out of range (0.25..3600)" % text)
    return v


def depth_arg(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("'%s' is not an integer" % text) from None
    if not 1 <= v <= 64:
        raise argparse.ArgumentTypeError("%s is out of range (1..64)" % text)
    return v


def parse(argv):
    ap = Parser(prog=PROG, description="What a link carries for gloo (as pc-bench link).")
    ap.add_argument("--seconds", type=seconds_arg, default=5.0, metavar="S",
                    help="how long every flow streams [5]")
    ap.add_argument("--bytes", type=size_arg, default=4 << 20, metavar="SIZE",
                    help="size of each message, at least 2 [4M]")
    ap.add_argument("--depth", type=depth_arg, default=4, metavar="N",
                    help="messages in flight per flow [4]")
    ap.add_argument("--json", metavar="FILE", help="also write the JSON line to FILE")
    ap.add_argument("--port", type=int, metavar="P",
                    help="the rendezvous port [$MASTER_PORT, or 29511]")
    return ap.parse_args(argv)


def send_flow(dist, torch, nbytes, depth, peer, deadline):
    """Stream to peer until deadline (time.perf_counter), then the stop messages."""
    data = torch.ones(nbytes, dtype=torch.uint8)  # first byte 1: data (only read while sent)
    stop = torch.zeros(nbytes, dtype=torch.uint8)
    works = [dist.isend(data, peer) for _ in range(depth)]
    i = 0
    while True:
        works[i].wait()
        if time.perf_counter() >= deadline:
            break
        works[i] = dist.isend(data, peer)
        i = (i + 1) % depth
    for k in range(1, depth):
        works[(i + k) % depth].wait()
    for w in [dist.isend(stop, peer) for _ in range(depth)]:
        w.wait()


def recv_flow(dist, torch, nbytes, depth, peer, t0):
    """Receive from peer until its first stop message: (payload bytes, seconds from t0 to
    the last data message)."""
    bufs = [torch.empty(nbytes, dtype=torch.uint8) for _ in range(depth)]
    works = [dist.irecv(b, peer) for b in bufs]
    got, last, i = 0, t0, 0
    while True:
        works[i].wait()
        if int(bufs[i][0]) == 0:
            break
        last = time.perf_counter()
        got += nbytes
        works[i] = dist.irecv(bufs[i], peer)
        i = (i + 1) % depth
    for k in range(1, depth):  # the remaining stop messages
        j = (i + k) % depth
        works[j].wait()
        if int(bufs[j][0]) != 0:
            raise RuntimeError("from rank %d: data after the stop message" % peer)
    return got, last - t0


def report(args, results):
    """Rank 0: the lines pc-bench link prints, from every rank's (bytes, seconds, host)."""
    flows = len(results) // 2
    lines = ["link: %d flow(s), gloo, %d-byte messages, %d in flight, %.1f s"
             % (flows, args.bytes, args.depth, args.seconds)]
    gbps, total_bytes, longest = [], 0.0, 0.0
    for f in range(flows):
        b, s, host = results[2 * f + 1]
        g = b * 8 / s * 1e-9 if s > 0 else 0.0
        gbps.append(g)
        lines.append("flow %d: rank %d (%s) -> rank %d (%s): %.1f MB in %.2f s, %.3f Gbit/s"
                     % (f, 2 * f, results[2 * f][2], 2 * f + 1, host, b * 1e-6, s, g))
        total_bytes += b
        longest = max(longest, s)
    total = total_bytes * 8 / longest * 1e-9 if longest > 0 else 0.0
    lines.append("total: %.3f Gbit/s over %d flow(s) (%.1f MB in %.2f s)"
                 % (total, flows, total_bytes * 1e-6, longest))
    js = json.dumps({"benchmark": "link", "transport": "gloo", "flows": flows,
                     "bytes": args.bytes, "depth": args.depth, "seconds": args.seconds,
                     "flow_gbps": [round(g, 4) for g in gbps], "total_gbps": round(total, 4),
                     "bytes_moved": int(total_bytes), "elapsed_s": round(longest, 4)})
    print("\n".join(lines + [js]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            f.write(js + "\n")
    return 0 if total_bytes > 0 else 1


def main(argv):
    args = parse(argv)
    env = os.environ
    rank = int(env.get("OMPI_COMM_WORLD_RANK", env.get("RANK", "0")))
    world = int(env.get("OMPI_COMM_WORLD_SIZE", env.get("WORLD_SIZE", "1")))
    if world < 2 or world % 2:
        if rank == 0:
            sys.stderr.write("%s: needs an even number of ranks, 2 or more (got %d): rank 2i "
                             "streams to rank 2i+1\n" % (PROG, world))
        return 2
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)  # the flows' cores are the link's, not intra-op threads'
    addr = env.get("MASTER_ADDR", "127.0.0.1")
    port = args.port or int(env.get("MASTER_PORT", "29511"))
    dist.init_process_group("gloo", init_method="tcp://%s:%d" % (addr, port), rank=rank,
                            world_size=world)
    try:
        dist.barrier()  # every flow starts together
        t0 = time.perf_counter()
        mine = (0.0, 0.0, socket.gethostname())
        if rank % 2 == 0:
            send_flow(dist, torch, args.bytes, args.depth, rank + 1, t0 + args.seconds)
        else:
            b, s = recv_flow(dist, torch, args.bytes, args.depth, rank - 1, t0)
            mine = (float(b), s, socket.gethostname())
        results = [None] * world
        dist.all_gather_object(results, mine)
        status = report(args, results) if rank == 0 else 0
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

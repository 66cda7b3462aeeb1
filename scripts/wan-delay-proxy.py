#!/usr/bin/env python3
"""wan-delay-proxy.py — userspace one-way-delay TCP proxy (netem substitute).

A copy of the team's shared tool (tools/wan/), kept here so that
scripts/compare-etcd.sh runs from a fresh clone: it delays etcd's peer links
where megastore uses its own [[wan]] links.

Why: this kernel has no sch_netem (CONFIG_NET_SCH_NETEM is not set
and there are no loadable modules), so `tc qdisc ... netem delay` fails with
"Specified qdisc kind is unknown". This proxy emulates WAN latency at the
stream level instead: every chunk read on one side is written to the other
side DELAY ms later (per direction, order preserved), so a request/response
round trip through one proxy costs 2*DELAY.

What it does NOT emulate: packet loss, reordering, bandwidth-delay/TCP window
effects (the proxy terminates TCP and ACKs locally). For small RPC traffic
such as Raft/Paxos messages the per-message latency is what matters.

Usage (one process can serve several mappings):
  wan-delay-proxy.py --delay-ms 40 --map 127.0.0.1:33801=127.0.0.1:23801 \
                     --map 127.0.0.1:33802=127.0.0.1:23802 --max-secs 600

Safety: listen and target addresses must be loopback (127.0.0.0/8, ::1)
unless --allow-netns is given, which is meant only for addresses that live
inside network namespaces you created yourself. The process exits by itself
after --max-secs (default 1800, hard cap 7200).
"""
import argparse
import asyncio
import ipaddress
import random
import signal
import sys
import time


def hostport(s):
    host, _, port = s.rpartition(":")
    return host.strip("[]"), int(port)


def check_addr(host, allow_netns):
    ip = ipaddress.ip_address(host)
    if ip.is_loopback:
        return
    if allow_netns:
        return  # caller promises this address lives in a self-made netns
    sys.exit(f"refusing non-loopback address {host} (use --allow-netns only for self-created namespaces)")


async def pump(reader, writer, delay_s, jitter_s, stats, key):
    """Copy reader->writer, delaying each chunk by delay_s (+ uniform jitter)."""
    q = asyncio.Queue()

    async def sender():
        last_due = 0.0
        while True:
            due, data = await q.get()
            due = max(due, last_due)  # keep FIFO order even with jitter
            last_due = due
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:
                try:
                    if writer.can_write_eof():
                        writer.write_eof()
                except (OSError, RuntimeError):
                    pass
                return
            writer.write(data)
            stats[key] += len(data)
            try:
                await writer.drain()
            except (ConnectionError, OSError):
                return

    task = asyncio.create_task(sender())
    try:
        while True:
            data = await reader.read(65536)
            j = random.uniform(-jitter_s, jitter_s) if jitter_s else 0.0
            q.put_nowait((time.monotonic() + delay_s + j, data if data else None))
            if not data:
                break
    except (ConnectionError, OSError):
        q.put_nowait((time.monotonic(), None))
    await task


async def handle(client_r, client_w, target, delay_s, jitter_s, stats):
    try:
        up_r, up_w = await asyncio.wait_for(asyncio.open_connection(*target), 5)
    except (OSError, asyncio.TimeoutError):
        client_w.close()
        return
    stats["conns"] += 1
    await asyncio.gather(
        pump(client_r, up_w, delay_s, jitter_s, stats, "bytes_fwd"),
        pump(up_r, client_w, delay_s, jitter_s, stats, "bytes_back"),
        return_exceptions=True,
    )
    for w in (up_w, client_w):
        try:
            w.close()
        except Exception:
            pass


async def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--map", action="append", required=True, help="LISTEN_HOST:PORT=TARGET_HOST:PORT")
    ap.add_argument("--delay-ms", type=float, default=40.0, help="one-way delay per direction")
    ap.add_argument("--jitter-ms", type=float, default=0.0, help="uniform +/- jitter (order is preserved)")
    ap.add_argument("--max-secs", type=float, default=1800.0, help="exit after this many seconds")
    ap.add_argument("--allow-netns", action="store_true", help="permit non-loopback addresses (self-made netns only)")
    a = ap.parse_args()
    max_secs = min(a.max_secs, 7200.0)
    stats = {"conns": 0, "bytes_fwd": 0, "bytes_back": 0}
    servers = []
    for m in a.map:
        lst, tgt = m.split("=")
        lh, lp = hostport(lst)
        th, tp = hostport(tgt)
        check_addr(lh, a.allow_netns)
        check_addr(th, a.allow_netns)
        srv = await asyncio.start_server(
            lambda r, w, t=(th, tp): handle(r, w, t, a.delay_ms / 1000, a.jitter_ms / 1000, stats), lh, lp
        )
        servers.append(srv)
        print(f"proxy {lh}:{lp} -> {th}:{tp} delay={a.delay_ms}ms jitter={a.jitter_ms}ms", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await asyncio.wait_for(stop.wait(), max_secs)
    except asyncio.TimeoutError:
        print("max-secs reached, exiting", flush=True)
    for s in servers:
        s.close()
    print(f"stats {stats}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())

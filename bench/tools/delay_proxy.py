#!/usr/bin/env python3
"""A TCP proxy on loopback that adds network delay without limiting bandwidth, for the E5 benchmark
(remote images over a 20 ms round trip; this kernel has no netem).

    python3 bench/tools/delay_proxy.py --listen 127.0.0.1:0 --target 127.0.0.1:8080 --rtt-ms 20

It prints the port it listens on (one line, the number alone) once it accepts connections, then
forwards every connection to the target. Each chunk of bytes is stamped when it arrives and sent on
half the RTT later, in each direction, while later chunks keep arriving: a stream keeps flowing at
the speed of the two ends, only shifted in time, as over a long fat link. The first bytes a client
sends on a new connection wait one RTT more, which is what the TCP handshake would have cost them
(`--no-handshake-delay` turns that off). End of stream and resets are passed on with the same delay.
Only loopback addresses are accepted, on both sides.

It exits after --max-seconds (default 3600, 0 for never) or on SIGINT/SIGTERM. Stdlib only.
"""
import argparse
import asyncio
import collections
import ipaddress
import signal
import socket
import struct
import sys

# Bytes held per direction before the proxy stops reading from the sender: enough for a 20 ms delay
# at several GB/s (loopback speed), small enough that a stalled receiver cannot make it grow without
# bound.
MAX_HELD = 128 * 1024 * 1024
EOF_MARK, RESET_MARK = b"", None


def loopback_addr(text):
    """HOST:PORT with a loopback host (127.0.0.0/8, ::1, localhost)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    host = host.strip("[]")
    if host != "localhost":
        try:
            ok = ipaddress.ip_address(host).is_loopback
        except ValueError:
            ok = False
        if not ok:
            raise argparse.ArgumentTypeError(f"{host!r} is not a loopback address")
    return host, int(port)


def reset(transport):
    """Closes with an RST, not a FIN: a zero linger time makes close() reset the connection."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    transport.abort()


class Direction:
    """Bytes from one end to the other: each chunk is stamped as it arrives and written `delay`
    later (never before `hold_until`), in order, by one timer that serves every chunk whose time
    has come. Protocol callbacks and loop timers, not tasks and queues: per chunk that is a few
    microseconds of Python, so the proxy keeps up with loopback speeds."""

    def __init__(self, loop, delay, hold_until=0.0):
        self.loop, self.delay, self.hold_until = loop, delay, hold_until
        self.src = self.dst = None  # the End protocols, set when both are connected
        self.held = collections.deque()
        self.held_bytes = 0
        self.timer = None
        self.done = False

    def push(self, data):
        when = max(self.loop.time() + self.delay, self.hold_until)
        self.held.append((when, data))
        if data:
            self.held_bytes += len(data)
            if self.held_bytes > MAX_HELD:
                self.src.set_paused("held", True)
        if self.timer is None:
            self.timer = self.loop.call_at(when, self.flush)

    def flush(self):
        self.timer = None
        now = self.loop.time()
        dst = self.dst.transport
        if dst is None:  # the target refused the connection: nothing to deliver to
            self.held.clear()
            self.held_bytes = 0
            self.done = True
            return
        while self.held and self.held[0][0] <= now:
            _, data = self.held.popleft()
            if data is RESET_MARK:
                reset(dst)
                self.done = True
            elif data == EOF_MARK:
                if not dst.is_closing() and dst.can_write_eof():
                    dst.write_eof()
                self.done = True
            else:
                self.held_bytes -= len(data)
                if not dst.is_closing():
                    dst.write(data)
        if self.held_bytes <= MAX_HELD // 2:
            self.src.set_paused("held", False)
        if self.held:
            self.timer = self.loop.call_at(self.held[0][0], self.flush)
        self.src.conn.maybe_close()


class End(asyncio.Protocol):
    """One socket of a proxied connection (the client's or the target's)."""

    def __init__(self, conn, outgoing, on_made=None):
        self.conn, self.outgoing = conn, outgoing  # outgoing: the Direction it feeds
        self.on_made = on_made
        self.transport = None
        self.pauses = set()
        self.reading = True
        self.ended = False  # whether its end of stream (or reset) has been passed on

    def connection_made(self, transport):
        self.transport = transport
        if self.on_made:
            self.on_made(self)

    def set_paused(self, why, paused):
        (self.pauses.add if paused else self.pauses.discard)(why)
        want = not self.pauses
        if want != self.reading and not self.transport.is_closing():
            (self.transport.resume_reading if want else self.transport.pause_reading)()
            self.reading = want

    def data_received(self, data):
        self.outgoing.push(data)

    def eof_received(self):
        self.ended = True
        self.outgoing.push(EOF_MARK)
        return True  # half-close: the other direction may still flow

    def connection_lost(self, exc):
        if not self.ended:
            self.ended = True
            self.outgoing.push(RESET_MARK if exc else EOF_MARK)

    # This end's writes are buffered beyond its limit: stop reading what feeds them.
    def pause_writing(self):
        self.conn.peer(self).set_paused("peer", True)

    def resume_writing(self):
        self.conn.peer(self).set_paused("peer", False)


class Connection:
    """A client's connection and the proxy's connection to the target on its behalf."""

    def __init__(self, loop, args):
        self.loop, self.target = loop, args.target
        half = args.rtt_ms / 2000.0
        # Over a real link the first bytes a client sends would leave one RTT later (SYN,
        # SYN-ACK) and arrive half an RTT after that.
        hold = 0.0 if args.no_handshake_delay else loop.time() + 3 * half
        self.up = Direction(loop, half, hold)
        self.down = Direction(loop, half)
        self.client = End(self, self.up, on_made=self.client_made)
        self.server = End(self, self.down)
        self.up.src, self.up.dst = self.client, self.server
        self.down.src, self.down.dst = self.server, self.client

    def client_made(self, client):
        client.set_paused("connecting", True)  # nothing to forward to yet
        # Kept: the loop holds only a weak reference to a task.
        self.connecting = self.loop.create_task(self.connect_target())

    async def connect_target(self):
        try:
            await self.loop.create_connection(lambda: self.server, *self.target)
        except OSError as e:
            print(f"delay_proxy: cannot connect to {self.target[0]}:{self.target[1]}: {e}",
                  file=sys.stderr)
            reset(self.client.transport)
            return
        self.client.set_paused("connecting", False)

    def peer(self, end):
        return self.server if end is self.client else self.client

    def maybe_close(self):
        if self.up.done and self.down.done and not self.up.held and not self.down.held:
            for end in (self.client, self.server):
                if end.transport is not None:
                    end.transport.close()


async def main(args):
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Connection(loop, args).client, args.listen[0], args.listen[1], reuse_address=True)
    print(server.sockets[0].getsockname()[1], flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await asyncio.wait_for(stop.wait(), args.max_seconds or None)
    except asyncio.TimeoutError:
        print(f"delay_proxy: stopping after --max-seconds {args.max_seconds}", file=sys.stderr)
    server.close()


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="TCP proxy on loopback adding RTT/2 to each direction, without limiting "
                    "bandwidth. Prints its port when ready.")
    p.add_argument("--listen", type=loopback_addr, required=True,
                   help="HOST:PORT to listen on (loopback; port 0 lets the kernel choose)")
    p.add_argument("--target", type=loopback_addr, required=True,
                   help="HOST:PORT to forward to (loopback)")
    p.add_argument("--rtt-ms", type=float, required=True,
                   help="round-trip time to add, in milliseconds (half each way)")
    p.add_argument("--no-handshake-delay", action="store_true",
                   help="do not hold a new connection's first bytes one RTT for the TCP handshake")
    p.add_argument("--max-seconds", type=float, default=3600,
                   help="exit after this many seconds (default 3600; 0 for never)")
    args = p.parse_args(argv)
    if args.rtt_ms < 0 or args.max_seconds < 0:
        p.error("--rtt-ms and --max-seconds cannot be negative")
    return args


if __name__ == "__main__":
    try:
        asyncio.run(main(parse_args(sys.argv[1:])))
    except OSError as e:
        print(f"delay_proxy: {e}", file=sys.stderr)
        sys.exit(1)

#!/usr/bin/env python3
"""While session A runs getAllChildrenNumber(PATH) back to back, session B times
getData of one small node: how long does a short read of another session wait?

    bench/long-read-probe.py HOST:PORT PATH NODE SECS

Raw jute over a socket (no client library), new sessions, open ACLs; the loop runs
for SECS seconds and stops by itself."""
import socket, struct, sys, threading, time, statistics

def conn(addr):
    h, p = addr.split(":")
    s = socket.create_connection((h, int(p)))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    body = struct.pack(">iqiqi", 0, 0, 30000, 0, 16) + b"\0" * 16 + b"\0"
    s.sendall(struct.pack(">i", len(body)) + body)
    read_frame(s)
    return s

def read_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise EOFError
        b += c
    return b

def read_frame(s):
    (n,) = struct.unpack(">i", read_exact(s, 4))
    return read_exact(s, n)

def call(s, xid, op, body):
    payload = struct.pack(">ii", xid, op) + body
    s.sendall(struct.pack(">i", len(payload)) + payload)
    while True:
        f = read_frame(s)
        rx, _zxid, err = struct.unpack(">iqi", f[:16])
        if rx == xid:
            return err, f[16:]

def path(p):
    b = p.encode()
    return struct.pack(">i", len(b)) + b

addr, big, node, secs = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
a, b = conn(addr), conn(addr)
stop = time.time() + secs
counts = []
def long_reads():
    x = 0
    while time.time() < stop:
        x += 1
        t = time.perf_counter()
        err, body = call(a, x, 104, path(big))
        assert err == 0, err
        counts.append((struct.unpack(">i", body[:4])[0], time.perf_counter() - t))
th = threading.Thread(target=long_reads)
th.start()
lat = []
x = 0
while time.time() < stop:
    x += 1
    t = time.perf_counter()
    err, _ = call(b, x, 4, path(node) + b"\0")
    lat.append((time.perf_counter() - t) * 1000)
    assert err == 0, err
th.join()
lat.sort()
q = lambda f: lat[min(len(lat) - 1, int(f * len(lat)))]
print("getAllChildrenNumber: %d calls, count %d, median %.0f ms" % (
    len(counts), counts[-1][0], statistics.median(c[1] for c in counts) * 1000))
print("getData of another session during them: %d calls, p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms, max %.2f ms" % (
    len(lat), q(0.5), q(0.99), q(0.999), lat[-1]))

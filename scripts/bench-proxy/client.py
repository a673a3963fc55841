#!/usr/bin/env python3
"""Times N requests to 127.0.0.1:PORT: direct, plain HTTP through $HTTP_PROXY, or CONNECT."""
import os, socket, statistics, sys, time
port = int(sys.argv[1]); n = int(sys.argv[2]); mode = sys.argv[3]
proxy = os.environ.get("HTTP_PROXY")
times = []
for i in range(n):
    t = time.perf_counter()
    if mode == "direct":
        s = socket.create_connection(("127.0.0.1", port)); s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    elif mode == "http":
        pp = int(proxy.rsplit(":",1)[1]); s = socket.create_connection(("127.0.0.1", pp))
        s.sendall(b"GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost: x\r\n\r\n" % port)
    else:
        pp = int(proxy.rsplit(":",1)[1]); s = socket.create_connection(("127.0.0.1", pp))
        s.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % port)
        buf = b""
        while b"\r\n\r\n" not in buf: buf += s.recv(4096)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while True:
        c = s.recv(4096)
        if not c: break
        data += c
    s.close()
    assert data.endswith(b"ok"), data
    times.append((time.perf_counter() - t) * 1e6)
times = times[20:]
print(f"{mode}: n={len(times)} median={statistics.median(times):.0f}us p90={sorted(times)[int(len(times)*0.9)]:.0f}us mean={statistics.mean(times):.0f}us")

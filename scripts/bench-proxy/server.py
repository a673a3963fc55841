#!/usr/bin/env python3
"""Benchmark server for the egress proxy: answers each HTTP request with `ok` and closes."""
import socketserver, sys
class H(socketserver.StreamRequestHandler):
    def handle(self):
        while True:
            line = self.rfile.readline()
            if not line or line in (b"\r\n", b"\n"): break
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
socketserver.ThreadingTCPServer.allow_reuse_address = True
s = socketserver.ThreadingTCPServer(("127.0.0.1", int(sys.argv[1])), H)
s.serve_forever()

# ruff: noqa: E501
"""Servers the port tests start inside a sandbox: stdlib only, as the sandbox image has.

``SERVERS`` is the text of a script written into the sandbox and run in the
background: ``python3 servers.py stream PORT`` serves a chunked response that
arrives slowly (``/ticks?n=5&gap=0.3``: one line per tick, each flushed) and
echoes a POST's body (``/echo``); ``python3 servers.py ws PORT`` is a WebSocket
echo server (text and binary messages, closes as asked), written against RFC
6455 with the standard library.
"""

from __future__ import annotations

__all__ = ["SERVERS"]

SERVERS = r"""
import base64, hashlib, socket, struct, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

class Stream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def do_GET(self):
        url = urlsplit(self.path)
        q = parse_qs(url.query)
        if url.path.endswith("/headers"):
            body = "\n".join(f"{k.lower()}: {v}" for k, v in self.headers.items()).encode()
            self._plain(body)
            return
        n, gap = int(q.get("n", ["5"])[0]), float(q.get("gap", ["0.3"])[0])
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(n):
            line = f"tick {i} {time.time():.3f}\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()
            time.sleep(gap)
        self.wfile.write(b"0\r\n\r\n")
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        self._plain(b"echo:" + self.rfile.read(n))
    do_PUT = do_PATCH = do_DELETE = do_POST
    def _plain(self, body):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

def recv_exact(c, n):
    buf = b""
    while len(buf) < n:
        chunk = c.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf

def ws_client(c):
    head = b""
    while b"\r\n\r\n" not in head:
        head += c.recv(4096)
    lines = head.decode().split("\r\n")
    hdrs = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
    accept = base64.b64encode(hashlib.sha1(hdrs["sec-websocket-key"].encode() + GUID).digest())
    extra = ""
    if "sec-websocket-protocol" in hdrs:
        extra = "Sec-WebSocket-Protocol: " + hdrs["sec-websocket-protocol"].split(",")[0].strip() + "\r\n"
    c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Accept: " + accept.decode() + "\r\n" + extra + "\r\n").encode())
    try:
        while True:
            b1, b2 = recv_exact(c, 2)
            op, n = b1 & 0x0F, b2 & 0x7F
            if n == 126:
                n = struct.unpack("!H", recv_exact(c, 2))[0]
            elif n == 127:
                n = struct.unpack("!Q", recv_exact(c, 8))[0]
            mask = recv_exact(c, 4) if b2 & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(recv_exact(c, n)))
            if op == 8:
                c.sendall(b"\x88" + bytes([len(data)]) + data)
                return
            if op == 9:
                op = 10
            if len(data) < 126:
                hdr = bytes([0x80 | op, len(data)])
            elif len(data) < 65536:
                hdr = bytes([0x80 | op, 126]) + struct.pack("!H", len(data))
            else:
                hdr = bytes([0x80 | op, 127]) + struct.pack("!Q", len(data))
            c.sendall(hdr + data)
    except (EOFError, OSError):
        pass
    finally:
        c.close()

def ws(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(16)
    while True:
        c, _ = s.accept()
        threading.Thread(target=ws_client, args=(c,), daemon=True).start()

if __name__ == "__main__":
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "ws":
        ws(port)
    else:
        ThreadingHTTPServer(("127.0.0.1", port), Stream).serve_forever()
"""

"""WebSockets over TLS, with nothing but the standard library: an HTTPS upstream that also echoes
WebSockets, and a client that holds several WebSockets open through a TLS gateway. The frames
are websocket.py's (RFC 6455); this adds TLS on both sides.

    python3 wss.py serve CERT KEY
        # prints its port; answers GET and HEAD 200 with the header X-Upstream-TLS (the TLS
        # version, and the name the client sent by SNI) and, for GET, a JSON body saying the
        # same with the method, path and Host; takes up a WebSocket upgrade, sends one text
        # message of that JSON first, then echoes every message

    python3 wss.py hold PORT CA HOST PATH N
        # connects to 127.0.0.1:PORT over TLS (trusting CA, asking for HOST by SNI, offering
        # http/1.1 by ALPN) and, holding each open, upgrades N WebSockets to PATH-1 ... PATH-N:
        # prints "open I STATUS", "greeting I JSON", "echoed I 3" for each; then, while those
        # are open, one more: "extra STATUS"; then closes the first with the close handshake,
        # "closed 1", and tries one more until it is switched (5 s at most): "after STATUS"
"""

import base64
import json
import os
import socket
import ssl
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import websocket as ws  # noqa: E402  (support/websocket.py, beside this file)


def facts(conn, method, path, host):
    return {
        "tls": conn.version(),
        "sni": getattr(conn, "sni", None),
        "method": method,
        "path": path,
        "host": host,
    }


def handle(conn):
    try:
        conn.do_handshake()
        pending = b""
        while True:
            head, pending = ws.read_head(conn, pending)
            if head is None:
                return
            lines = head.split("\r\n")
            method, path = lines[0].split(" ")[:2]
            headers = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
            said = facts(conn, method, path, headers.get("host"))
            tls = "%s sni=%s" % (said["tls"], said["sni"])
            if headers.get("upgrade", "").lower() == "websocket":
                conn.sendall(
                    (
                        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        "Sec-WebSocket-Accept: %s\r\nX-Upstream-TLS: %s\r\n\r\n"
                        % (ws.accept(headers["sec-websocket-key"]), tls)
                    ).encode()
                )
                conn.sendall(ws.frame(1, json.dumps(said).encode(), False))
                buf = [pending]
                while True:
                    opcode, payload = ws.read_frame(conn, buf)
                    conn.sendall(ws.frame(opcode, payload, False))
                    if opcode == 8:
                        return
            # A plain request (no body: the tests send GET and HEAD), answered on a kept-alive
            # connection as the gateway's pool expects.
            body = json.dumps(said).encode()
            conn.sendall(
                (
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                    "X-Upstream-TLS: %s\r\n\r\n" % (len(body), tls)
                ).encode()
                + (b"" if method == "HEAD" else body)
            )
    except (EOFError, OSError, ValueError):
        pass
    finally:
        conn.close()


def serve(cert, key):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)

    def remember_sni(conn, name, _context):
        conn.sni = name

    context.sni_callback = remember_sni
    listener = ws.listen()
    while True:
        raw, _ = listener.accept()
        # The handshake happens in the connection's thread: a slow client cannot stall the rest.
        conn = context.wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


class Client:
    """One WebSocket over TLS to the gateway."""

    def __init__(self, port, ca, host, path):
        context = ssl.create_default_context(cafile=ca)
        context.set_alpn_protocols(["http/1.1"])
        raw = socket.create_connection(("127.0.0.1", int(port)), timeout=10)
        self.sock = context.wrap_socket(raw, server_hostname=host)
        self.key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                "GET %s HTTP/1.1\r\nHost: %s:%s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (path, host, port, self.key)
            ).encode()
        )
        head, rest = ws.read_head(self.sock)
        self.status = head.split("\r\n")[0] if head else "no answer"
        self.buf = [rest]
        if " 101 " in self.status + " ":
            headers = {
                l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in head.split("\r\n")[1:] if ":" in l
            }
            if headers.get("sec-websocket-accept") != ws.accept(self.key):
                raise SystemExit("bad Sec-WebSocket-Accept: %s" % head)

    def switched(self):
        return " 101 " in self.status + " "

    def message(self):
        opcode, payload = ws.read_frame(self.sock, self.buf)
        if opcode != 1:
            raise SystemExit("opcode %d where a text message was expected" % opcode)
        return payload.decode()

    def echo(self, n, tag):
        for i in range(n):
            sent = "message %d of socket %s " % (i, tag) + "x" * (i * 1000)
            self.sock.sendall(ws.frame(1, sent.encode(), True))
            if self.message() != sent:
                raise SystemExit("bad echo %d on socket %s" % (i, tag))

    def close(self):
        self.sock.sendall(ws.frame(8, struct.pack(">H", 1000), True))
        opcode, _ = ws.read_frame(self.sock, self.buf)
        if opcode != 8:
            raise SystemExit("no close frame back")
        self.sock.close()


def hold(port, ca, host, path, n):
    n = int(n)
    held = []
    for i in range(1, n + 1):
        c = Client(port, ca, host, "%s-%d" % (path, i))
        print("open %d %s" % (i, c.status), flush=True)
        if not c.switched():
            return 1
        print("greeting %d %s" % (i, c.message()), flush=True)
        c.echo(3, i)
        print("echoed %d 3" % i, flush=True)
        held.append(c)
    extra = Client(port, ca, host, "%s-%d" % (path, n + 1))
    print("extra %s" % extra.status, flush=True)
    extra.sock.close()
    held.pop(0).close()
    print("closed 1", flush=True)
    # The gateway gives the slot back when its side of the tunnel is done, which may be a
    # moment after this client saw the close: ask again until it is switched, for 5 s at most.
    deadline = time.monotonic() + 5
    while True:
        again = Client(port, ca, host, "%s-again" % path)
        again.sock.close()
        if again.switched() or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    print("after %s" % again.status, flush=True)
    for c in held:
        c.close()
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(*sys.argv[2:4])
    else:
        sys.exit(hold(*sys.argv[2:7]))

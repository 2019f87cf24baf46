"""A WebSocket echo server and client, with nothing but the standard library (RFC 6455).

    python3 websocket.py serve            # prints its port, echoes every message
    python3 websocket.py client HOST PORT PATH N
        # upgrades PATH, sends N text messages and checks each echo, closes; prints the
        # status line, then "echoed N" and "closed" as each step succeeds

Paths the server treats apart: one containing "refuse" is answered 403 (no upgrade); one
containing "close-after-one" has the server close the TCP connection after its first echo.
"""

import base64
import hashlib
import os
import socket
import struct
import sys
import threading

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def read_head(sock, data=b""):
    """A head and what came after it, reading on from `data` (None at the end)."""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            return None, b""
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    return head.decode("latin-1"), rest


def recv_exact(sock, n, buf):
    while len(buf[0]) < n:
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError
        buf[0] += chunk
    out, buf[0] = buf[0][:n], buf[0][n:]
    return out


def read_frame(sock, buf):
    b0, b1 = recv_exact(sock, 2, buf)
    opcode, masked, length = b0 & 0x0F, b1 & 0x80, b1 & 0x7F
    if length == 126:
        length = struct.unpack(">H", recv_exact(sock, 2, buf))[0]
    elif length == 127:
        length = struct.unpack(">Q", recv_exact(sock, 8, buf))[0]
    mask = recv_exact(sock, 4, buf) if masked else None
    payload = recv_exact(sock, length, buf)
    if mask:
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return opcode, payload


def frame(opcode, payload, mask):
    head = bytes([0x80 | opcode])
    n = len(payload)
    bit = 0x80 if mask else 0
    if n < 126:
        head += bytes([bit | n])
    elif n < 65536:
        head += bytes([bit | 126]) + struct.pack(">H", n)
    else:
        head += bytes([bit | 127]) + struct.pack(">Q", n)
    if mask:
        key = os.urandom(4)
        return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return head + payload


def accept(key):
    return base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()


def handle(conn):
    try:
        head, rest = read_head(conn)
        if head is None:
            return
        lines = head.split("\r\n")
        path = lines[0].split(" ")[1]
        headers = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
        if "refuse" in path or headers.get("upgrade", "").lower() != "websocket":
            body = b"no websocket here"
            conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            return
        conn.sendall(
            (
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                "Sec-WebSocket-Accept: %s\r\n\r\n" % accept(headers["sec-websocket-key"])
            ).encode()
        )
        buf = [rest]
        while True:
            opcode, payload = read_frame(conn, buf)
            if opcode == 8:
                conn.sendall(frame(8, payload, False))
                return
            conn.sendall(frame(opcode, payload, False))
            if "close-after-one" in path:
                return
    except (EOFError, OSError):
        pass
    finally:
        conn.close()


def listen():
    """A listener on a free port of 127.0.0.1, its port printed (the test reads it)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    print(listener.getsockname()[1], flush=True)
    return listener


def serve():
    listener = listen()
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def client(host, port, path, n):
    sock = socket.create_connection((host, int(port)), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            "GET %s HTTP/1.1\r\nHost: %s:%s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (path, host, port, key)
        ).encode()
    )
    head, rest = read_head(sock)
    status = head.split("\r\n")[0] if head else "no answer"
    print(status, flush=True)
    if " 101 " not in status + " ":
        return 1
    headers = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in head.split("\r\n")[1:] if ":" in l}
    if headers.get("sec-websocket-accept") != accept(key):
        print("bad Sec-WebSocket-Accept", flush=True)
        return 1
    buf = [rest]
    for i in range(int(n)):
        message = ("hello %d " % i).encode() + b"x" * (i * 1000)
        sock.sendall(frame(1, message, True))
        opcode, payload = read_frame(sock, buf)
        if opcode != 1 or payload != message:
            print("bad echo %d" % i, flush=True)
            return 1
    print("echoed %s" % n, flush=True)
    sock.sendall(frame(8, struct.pack(">H", 1000), True))
    try:
        opcode, _ = read_frame(sock, buf)
    except EOFError:
        opcode = None
    if opcode == 8:
        print("closed", flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve()
    else:
        sys.exit(client(*sys.argv[2:6]))

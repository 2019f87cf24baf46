"""An HTTPS upstream for the gateway's tests, with nothing but the standard library.

    python3 https_upstream.py CERT KEY [CLIENT_CA]

Prints its port, then answers every request 200 with JSON: the method, the path, the Host
header, and the common name of the client certificate (when CLIENT_CA is given, a client
certificate signed by it is required).
"""

import http.server
import json
import ssl
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        cert = self.connection.getpeercert()
        client = None
        if cert:
            for rdn in cert.get("subject", ()):
                for key, value in rdn:
                    if key == "commonName":
                        client = value
        body = json.dumps({"method": self.command, "path": self.path, "host": self.headers.get("Host"), "client": client})
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def main():
    cert, key = sys.argv[1], sys.argv[2]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    if len(sys.argv) > 3:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(sys.argv[3])
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

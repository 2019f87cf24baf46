#!/usr/bin/env python3
"""An upstream that reads requests the way common web applications do, for the binary's
tests (`tests/app_reads.rs`, started through `support/app.rs`).

A rate limit in front of an application protects it only if the account sluice counts is the
account the application acts on. This server reads each request as frameworks do and counts,
per endpoint, how many times it acted on each account:

- body: `application/x-www-form-urlencoded` parsed as a form (Express `urlencoded`, Rails,
  Django); JSON only when the content type says JSON (`application/json`, `+json`); a field
  is looked up in the query string first, then the body (Flask's `request.values`).
- header names: `_` read as `-`, case-insensitively (WSGI/CGI `HTTP_X_API_KEY`); the first
  line of a repeated header; values `str.strip()`ped (Latin-1 decoded, so `\\xa0` and `\\x85`
  are whitespace).
- tokens: `Bearer` then any run of spaces and tabs; base64url padding `=` ignored (PyJWT); the
  HS256 signature checked with the secret given; the token's `sub` is the account.
- target: the path as a URL parser resolves it against `http://x/` (`//host/p` is `/p`; dot
  segments resolved), percent-decoded, trailing dots and whitespace trimmed, a `.json`/`.xml` format suffix
  dropped (Rails' `(.:format)`), a trailing `/` ignored.
- accounts: NFKC, case-folded, combining marks and default-ignorable characters removed,
  dotless `ı` and dotted `İ` read as `i` (accent- and width-insensitive matching).

Endpoints: `POST /api/password-reset` (field `email`), `GET /api/data` (header `X-Api-Key`),
`GET /api/profile` (bearer token; without a valid one, the public profile: no act),
`GET /api/items` (a listing). Its own refusals use statuses sluice's do not (404, 422), so a
test can also tell them apart by status. `GET /__counts` answers what
it saw as JSON: `acts` (endpoint -> account -> times acted on), `seen` (the `X-Trial` value of
every request that reached it) and `identity` (every forwarding or user header, in whatever
spelling, as `[name, value]`). Each answer carries `X-App-Request: <X-Trial>`, so a test can
tell the application's answers from sluice's own.

Usage: app_upstream.py --hs256-secret SECRET  (prints `app listening on 127.0.0.1:PORT`)
"""

import base64
import hashlib
import hmac
import json
import re
import socketserver
import sys
import threading
import unicodedata
from urllib.parse import parse_qsl, unquote, urljoin, urlsplit

LOCK = threading.Lock()
STATE = {"acts": {}, "seen": [], "identity": []}
SECRET = b""

# Header names that say who the client is, as sluice writes or strips them.
IDENTITY = ("x-forwarded-for", "x-real-ip", "x-user", "forwarded")

# Unicode's Default_Ignorable_Code_Point characters (DerivedCoreProperties.txt), which
# Python's unicodedata does not expose: soft hyphen, zero-width space and joiners, bidi marks,
# variation selectors, tags...
IGNORABLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)


def account_key(value):
    """The account an accent-, width- and case-insensitive application matches `value` to."""
    value = value.replace("\u0131", "i").replace("\u0130", "i")
    value = unicodedata.normalize("NFKC", value).casefold()
    value = "".join(c for c in unicodedata.normalize("NFD", value) if unicodedata.category(c) != "Mn")
    return unicodedata.normalize("NFC", IGNORABLE.sub("", value))


def route_path(target):
    """The path a framework routes `target` by."""
    segments = []
    for segment in urlsplit(urljoin("http://x/", target)).path.split("/")[1:]:
        if segment == "..":
            segments = segments[:-1]
        elif segment != ".":
            segments.append(segment)
    path = unquote("/" + "/".join(segments))
    path = re.sub(r"[\s.]+$", "", path)
    path = re.sub(r"\.(json|xml)$", "", path)
    path = re.sub(r"[\s.]+$", "", path)
    return path.rstrip("/") or "/"


def b64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Request:
    def __init__(self, method, target, headers, body):
        self.method = method
        self.target = target
        self.headers = headers  # [(name as sent, value as sent)], Latin-1 decoded
        self.body = body

    def header(self, name):
        """The first line whose name reads as `name` (`_` as `-`, any case), stripped."""
        for raw, value in self.headers:
            if raw.strip().replace("_", "-").lower() == name:
                return value.strip()
        return None

    def field(self, name):
        """A parameter as `request.values` reads it: the query string first, then the body."""
        for key, value in parse_qsl(urlsplit(self.target).query, keep_blank_values=True):
            if key == name:
                return value
        ctype = (self.header("content-type") or "").split(";")[0].strip().lower()
        if ctype == "application/x-www-form-urlencoded":
            for key, value in parse_qsl(self.body.decode("utf-8", "replace"), keep_blank_values=True):
                if key == name:
                    return value
        elif ctype == "application/json" or ctype.endswith("+json"):
            try:
                doc = json.loads(self.body)
            except ValueError:
                return None
            if isinstance(doc, dict) and isinstance(doc.get(name), str):
                return doc[name]
        return None

    def bearer_subject(self):
        """The `sub` of a lenient bearer token whose HS256 signature verifies, else None."""
        match = re.match(r"(?i)bearer[ \t]+(\S+)$", self.header("authorization") or "")
        if not match:
            return None
        parts = [p.rstrip("=") for p in match.group(1).split(".")]
        if len(parts) != 3:
            return None
        try:
            head, claims, signature = (json.loads(b64url(parts[0])), json.loads(b64url(parts[1])), b64url(parts[2]))
        except ValueError:
            return None
        want = hmac.new(SECRET, f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest()
        if head.get("alg") != "HS256" or not hmac.compare_digest(want, signature):
            return None
        sub = claims.get("sub")
        return sub if isinstance(sub, str) else None


def act(endpoint, account):
    with LOCK:
        accounts = STATE["acts"].setdefault(endpoint, {})
        accounts[account] = accounts.get(account, 0) + 1
    return 200, {"endpoint": endpoint, "account": account}


def answer(req):
    path = route_path(req.target)
    if path == "/__counts":
        with LOCK:
            return 200, json.loads(json.dumps(STATE))
    with LOCK:
        trial = req.header("x-trial")
        STATE["seen"].append(int(trial) if trial and trial.isdigit() else -1)
        for raw, value in req.headers:
            if raw.strip().replace("_", "-").lower() in IDENTITY:
                STATE["identity"].append([raw, value.strip()])
    if path == "/api/password-reset" and req.method == "POST":
        email = req.field("email")
        return act("password-reset", account_key(email)) if email else (422, {"error": "no email"})
    if path == "/api/data":
        key = req.header("x-api-key")
        return act("data", key) if key else (422, {"error": "no api key"})
    if path == "/api/profile":
        sub = req.bearer_subject()
        return act("profile", account_key(sub)) if sub else (200, {"endpoint": "profile", "account": None})
    if path == "/api/items":
        return act("items", "listing")
    return 404, {"error": "not found", "path": path}


class Handler(socketserver.StreamRequestHandler):
    """HTTP/1.1 read by hand: Python's own header parser splits lines at `\\x85`."""

    def handle(self):
        while True:
            line = self.rfile.readline(65537)
            if not line:
                return
            if line.strip() == b"":
                continue
            parts = line.decode("latin-1").rstrip("\r\n").split(" ")
            if len(parts) != 3:
                return
            method, target, _version = parts
            headers = []
            while True:
                raw = self.rfile.readline(65537)
                if not raw:
                    return
                text = raw.decode("latin-1")
                text = text[:-2] if text.endswith("\r\n") else text.rstrip("\n")
                if text == "":
                    break
                name, _, value = text.partition(":")
                headers.append((name, value))
            req = Request(method, target, headers, b"")
            if "chunked" in (req.header("transfer-encoding") or "").lower():
                body = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    chunk = self.rfile.read(size + 2)
                    if size == 0:
                        break
                    body += chunk[:size]
                req.body = body
            else:
                req.body = self.rfile.read(int(req.header("content-length") or "0"))
            status, doc = answer(req)
            body = json.dumps(doc).encode()
            trial = req.header("x-trial") or "-"
            head = (
                f"HTTP/1.1 {status} App\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nX-App-Request: {trial}\r\n\r\n"
            )
            self.wfile.write(head.encode("latin-1") + body)
            self.wfile.flush()
            if (req.header("connection") or "").lower() == "close":
                return


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    global SECRET
    args = sys.argv[1:]
    if len(args) != 2 or args[0] != "--hs256-secret":
        sys.exit("usage: app_upstream.py --hs256-secret SECRET")
    SECRET = args[1].encode()
    server = Server(("127.0.0.1", 0), Handler)
    print(f"app listening on 127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

// A peer for bench/gateway.sh: the seed tutorial's service (GET /api/hello limited per client IP
// by a token bucket, GET /health, JSON 404), written for this benchmark with Node's http module.
'use strict';
const http = require('node:http');

const port = Number(process.env.PORT || 3000);
const capacity = Number(process.env.RATE_LIMIT_CAPACITY || 5);
const perSecond = Number(process.env.RATE_LIMIT_REFILL_PER_SECOND || 1);
const state = new Map();

function take(ip) {
  const now = Date.now();
  const b = state.get(ip) || { tokens: capacity, at: now };
  b.tokens = Math.min(capacity, b.tokens + ((now - b.at) / 1000) * perSecond);
  b.at = now;
  state.set(ip, b);
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return { ok: true, left: Math.floor(b.tokens), wait: 0 };
  }
  return { ok: false, left: 0, wait: Math.max(1, Math.ceil((1 - b.tokens) / perSecond)) };
}

function reply(res, status, body, headers) {
  const text = JSON.stringify(body);
  res.writeHead(status, Object.assign({
    'Content-Type': 'application/json; charset=utf-8',
    'Content-Length': Buffer.byteLength(text),
  }, headers || {}));
  res.end(text);
}

http.createServer((req, res) => {
  const path = req.url.split('?')[0];
  if (req.method === 'GET' && path === '/health') return reply(res, 200, { status: 'ok' });
  if (path !== '/api/hello') return reply(res, 404, { error: 'not_found' });
  const r = take(req.socket.remoteAddress);
  const quota = { 'RateLimit-Limit': String(capacity), 'RateLimit-Remaining': String(r.left) };
  if (!r.ok) {
    return reply(res, 429, { error: 'rate_limit_exceeded', retryAfterSeconds: r.wait },
      Object.assign(quota, { 'Retry-After': String(r.wait) }));
  }
  return reply(res, 200, { message: 'allowed', client: req.socket.remoteAddress }, quota);
}).listen(port, '127.0.0.1');

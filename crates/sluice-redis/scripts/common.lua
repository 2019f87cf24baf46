-- sluice: what the decision script (decide.lua) and the settlement script (settle.lua) share:
-- the time, exact integer arithmetic on doubles, state read and written back. Each script is
-- this file followed by its own (the crate joins them; Redis sees one script).
--
-- ARGV[1]       now in microseconds since the Unix epoch, or "" for the server's TIME
-- ARGV[2]       milliseconds added to every expiry (0 on the server's clock; a grace period when
--               the caller passes its own time, whose pace Redis cannot know)
--
-- Lua numbers are doubles: integers are exact below 2^53, and the caller bounds every parameter
-- so that no intermediate value here reaches that (products that could are computed by
-- muldivmod). Numbers are written to Redis through fmt, never through Lua's default
-- conversion, which keeps only 14 digits.

if redis.replicate_commands then
  pcall(redis.replicate_commands) -- Redis < 5 needs it before TIME; later versions ignore it
end

local floor = math.floor
local EXACT = 9007199254740992 -- 2^53

local function fmt(x)
  return string.format('%.0f', x)
end

-- q, r with a = q * b + r, 0 <= r < b, for 0 <= a < 2^53 and 0 < b.
local function divmod(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then
    q, r = q - 1, r + b
  elseif r >= b then
    q, r = q + 1, r - b
  end
  return q, r
end

-- q, r with a * b = q * c + r, exact even when a * b exceeds 2^53 (c < 2^52, q < 2^52).
local function muldivmod(a, b, c)
  local p = a * b
  if p < EXACT then
    return divmod(p, c)
  end
  local bq, br = divmod(b, c)
  local bits, x = {}, a
  while x > 0 do
    local bit = x % 2
    bits[#bits + 1] = bit
    x = (x - bit) / 2
  end
  local q, r = 0, 0
  for i = #bits, 1, -1 do
    q, r = q * 2, r * 2
    if r >= c then
      q, r = q + 1, r - c
    end
    if bits[i] == 1 then
      q, r = q + bq, r + br
      if r >= c then
        q, r = q + 1, r - c
      end
    end
  end
  return q, r
end

local function ttl_ms(us)
  local q = divmod(us + 999, 1000)
  if q < 1 then
    q = 1
  end
  return q
end

local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local grace = tonumber(ARGV[2])

-- Tentative states by key, so that a key named twice in one request sees its own charge.
local states = {}
local kinds = {}

local function split(v, n)
  local out, i = {}, 0
  for part in string.gmatch(v, '[^:]+') do
    i = i + 1
    out[i] = tonumber(part)
  end
  if i ~= n then
    return nil
  end
  return out
end

local function load(key, n)
  local st = states[key]
  if st then
    return st
  end
  local v = redis.call('GET', key)
  local parsed = v and split(v, n)
  if parsed then
    return parsed
  end
  local fresh = {}
  for i = 1, n do
    fresh[i] = 0
  end
  return fresh
end

-- Writes a state back, to expire when it would be fresh again, or deletes it when it is fresh
-- now. kind: 1 fixed window {start, count}, 3 sliding window {start, prev, curr} (w: the
-- window), 4 GCRA {tat}.
local function save(key, kind, st, w)
  local fresh_in -- us until the state is fresh again
  if kind == 1 then
    fresh_in = st[1] + w - now
  elseif kind == 3 then
    if st[3] > 0 then
      fresh_in = st[1] + 2 * w - now
    elseif st[2] > 0 then
      fresh_in = st[1] + w - now
    else
      fresh_in = 0
    end
  else
    fresh_in = st[1] - now
  end
  if fresh_in > 0 and not (kind == 1 and st[2] == 0) then
    local parts = {}
    for j = 1, #st do
      parts[j] = fmt(st[j])
    end
    redis.call('SET', key, table.concat(parts, ':'), 'PX', ttl_ms(fresh_in) + grace)
  else
    redis.call('DEL', key)
  end
end

-- Calendar windows (algorithms 5 and 6): the caller, which knows the time zone, sends the
-- starts of n consecutive windows around its own time, `b1:...:bn` in us, its own window being
-- [b[mine], b[mine + 1]). Redis's clock picks between that window and the next (a caller a
-- little behind across the boundary: the next; a little ahead: its own, the strict direction).
-- Returns the n - 1 starts as Redis sees them (b[1 .. n-1], or b[2 .. n] once now >= b[mine + 1])
-- and the longest window: how long a state is kept, so that a state of any of these windows
-- outlives its window (a calendar's windows differ in length); or nil for malformed bounds.
local function calendar_bounds(text, n, mine)
  local b = text and split(text, n)
  if not b then
    return nil
  end
  local keep = 0
  for i = 2, n do
    if not (b[i - 1] < b[i]) then
      return nil
    end
    keep = math.max(keep, b[i] - b[i - 1])
  end
  local from = 1
  if now >= b[mine + 1] then
    from = 2
  end
  local out = {}
  for i = 1, n - 1 do
    out[i] = b[from + i - 1]
  end
  return out, keep
end

-- Sliding log: a sorted set of admitted timestamps, one member per unit of cost, named
-- `score:i` where the members of one score are always `score:0` .. `score:(k-1)`.

-- Adds n members at time `at` (after removing those that left the window w), and keeps the key
-- until its newest member leaves the window.
local function log_add(key, at, n, w)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - w))
  local score = fmt(at)
  local first = redis.call('ZCOUNT', key, score, score)
  local args, k = {}, 0
  for i = 0, n - 1 do
    args[k + 1] = score
    args[k + 2] = score .. ':' .. fmt(first + i)
    k = k + 2
    if k >= 1000 then
      redis.call('ZADD', key, unpack(args, 1, k))
      k = 0
    end
  end
  if k > 0 then
    redis.call('ZADD', key, unpack(args, 1, k))
  end
  redis.call('PEXPIRE', key, ttl_ms(at + w - now) + grace)
end

-- The newest member's time, or nil.
local function log_newest(key)
  local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if top[2] then
    return tonumber(top[2])
  end
  return nil
end

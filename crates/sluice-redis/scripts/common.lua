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
-- window). A GCRA state is written by gcra_save.
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

-- GCRA (token bucket, leaky bucket) state, with the holds of a policing bucket (quota leases:
-- hold.lua sets units apart, decide.lua and settle.lua honour them).
--
-- A key that never had a hold stores `tat` alone (us), as it always has. A key that has had
-- one stores `tat:held:next:earliest:latest` while its state lives: held, the units of its live
-- holds; next, the last id given (each id is the one before plus one, or the time of its grant
-- in us when that is later, so ids only grow, also across a state that expired and started
-- again); earliest and latest, the first and the last end (us) of its live holds (0 when none).
-- Its holds are in the hash `<key>:h`, field id -> `units:until` (us). The hash's name is the
-- state's key with `:h` appended: a stored key ends with its `{hash}` tag, so both names hold
-- the same first `{...}` and a Cluster puts them in the same slot. decide.lua and settle.lua
-- derive that name here rather than declare it (their calls stay as they are for every key,
-- and the hash is read only for a key whose state says it has holds); hold.lua declares both.
--
-- A hold ends at its until: not released by then, it counts as wholly spent then (reap). Expiry:
-- a key with live holds is kept, hash too, until max(tat, latest) + held x interval, when its
-- state would be fresh even with every hold reaped at its end; a key without live holds as any
-- GCRA key, until tat (no hold of it lives then; its next ids start from the time).
--
-- The state as a table: {tat, held, next, earliest, latest}, with `gone`, the ids to delete
-- from the hash when it is written, and `added`, a hold to record ({id, units, until}).

-- A parsed state string: `tat`, or `tat:held:next:earliest:latest`; anything else is fresh.
local function gcra_load(key)
  local st = states[key]
  if st then
    return st
  end
  local v = redis.call('GET', key)
  local tat = v and tonumber(v) -- a key without holds: one number
  if tat then
    return { tat, 0, 0, 0, 0 }
  end
  if v then
    local parts, n = {}, 0
    for part in string.gmatch(v, '[^:]+') do
      n = n + 1
      parts[n] = tonumber(part)
    end
    if n == 5 then
      return parts
    end
  end
  return { 0, 0, 0, 0, 0 }
end

-- The holds in `all` (the hash's HGETALL) but `skip`: those that ended by now, {id, units,
-- until} each, and the units, first end and last end of the others.
local function gcra_holds(all, skip)
  local due = {}
  local held, earliest, latest = 0, 0, 0
  for i = 1, #all, 2 do
    local id = tonumber(all[i])
    local h = split(all[i + 1], 2)
    if id and h and id ~= skip then
      if h[2] <= now then
        due[#due + 1] = { id, h[1], h[2] }
      else
        held = held + h[1]
        if earliest == 0 or h[2] < earliest then
          earliest = h[2]
        end
        if h[2] > latest then
          latest = h[2]
        end
      end
    end
  end
  return due, held, earliest, latest
end

-- Reaps the holds of `st` (in place) that ended by now, in order of their ends (of one end, of
-- their ids): each charged whole at its end, tat = max(tat, until) + units x t. Reads the hash
-- only when a hold has ended (now >= earliest). held, earliest and latest are then those of the
-- holds left.
local function gcra_reap(hkey, st, t)
  if st[2] <= 0 or now < st[4] then
    return
  end
  local due, held, earliest, latest = gcra_holds(redis.call('HGETALL', hkey), nil)
  table.sort(due, function(x, y)
    if x[3] ~= y[3] then
      return x[3] < y[3]
    end
    return x[1] < y[1]
  end)
  local tat = st[1]
  local gone = st.gone or {}
  for _, h in ipairs(due) do
    if tat < h[3] then
      tat = h[3]
    end
    tat = tat + h[2] * t
    gone[#gone + 1] = h[1]
  end
  st[1], st[2], st[4], st[5], st.gone = tat, held, earliest, latest, gone
end

-- Whole tokens left to others beside `held` units of holds, when `room` (us, tau less the
-- backlog, and less the request's charge when admitted) is left in the bucket: never below 0.
local function gcra_beside(room, t, held)
  if room < 0 then
    room = 0
  end
  local left = divmod(room, t) - held
  if left < 0 then
    return 0
  end
  return left
end

-- Writes a GCRA state back (interval t), with its holds' changes; deleted when fresh.
local function gcra_save(key, hkey, st, t)
  if st.gone and #st.gone > 0 then
    redis.call('HDEL', hkey, unpack(st.gone))
  end
  local a = st.added
  if a then
    redis.call('HSET', hkey, fmt(a[1]), fmt(a[2]) .. ':' .. fmt(a[3]))
  end
  local tat, held = st[1], st[2]
  if st[3] == 0 then
    -- Never held: `tat` alone, as before holds existed.
    if tat > now then
      redis.call('SET', key, fmt(tat), 'PX', ttl_ms(tat - now) + grace)
    else
      redis.call('DEL', key)
    end
    return
  end
  local fresh_in = tat - now
  if held > 0 then
    local last = tat
    if st[5] > last then
      last = st[5]
    end
    fresh_in = last + held * t - now
  end
  -- A state whose last id is this microsecond's (or later) is kept a moment even when fresh:
  -- deleted, the next hold granted in the same microsecond would take that id again.
  if fresh_in > 0 or st[3] >= now then
    local v = fmt(tat) .. ':' .. fmt(held) .. ':' .. fmt(st[3]) .. ':' .. fmt(st[4]) .. ':' .. fmt(st[5])
    local ms = ttl_ms(fresh_in) + grace
    redis.call('SET', key, v, 'PX', ms)
    if held > 0 then
      redis.call('PEXPIRE', hkey, ms)
    end
  else
    redis.call('DEL', key)
    redis.call('DEL', hkey) -- no hold lives; any record left is one that cannot be read
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

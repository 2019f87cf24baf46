-- sluice: settle charges the decision script made, in one call: each given back in part or
-- whole, or charged beyond what it reserved (a debt). Runs after common.lua.
--
-- KEYS[i]       the stored key of settlement i
-- ARGV[1], ARGV[2]  now and the expiry grace (common.lua)
-- ARGV[3+7(i-1) .. 9+7(i-1)]  settlement i: algorithm, a, b, c (as decide.lua; for a calendar
--               window, b = the start of the window the charge was made in; for a calendar
--               sliding window, `start:end` of that window), charged_at (us:
--               the time the decision script returned), back (units to give back), over (units
--               to charge beyond the reservation, at most twice the limit: a debt is at most one
--               limit); one of back and over is 0
--
-- Returns the number of settlements applied. Every rule mirrors sluice-core's `refund` and
-- `overrun` exactly, in microseconds.

local function max(x, y)
  if x > y then
    return x
  end
  return y
end

local function min(x, y)
  if x < y then
    return x
  end
  return y
end

-- Fixed window {start, count}: given back while the state counts the charge's window (it began
-- at cs); charged in the window of now (it begins at ws), up to twice the limit counted. The
-- state is kept for `keep` after its start (calendar_bounds').
local function fixed_window(key, limit, cs, ws, keep, back, over)
  local st = load(key, 2)
  local start, count = st[1], st[2]
  if back > 0 then
    if start == cs then
      count = max(count - back, 0)
    end
  else
    if not (count > 0 and start >= ws) then
      start, count = ws, 0
    end
    count = max(count, min(count + over, 2 * limit))
  end
  save(key, 1, { start, count }, keep)
end

-- Sliding window counter {start, prev, curr}: given back to the count of the charge's window
-- [cs, ce) (current, or previous); charged in the window of now, [ws, we) after [ps, ws), up to
-- twice the limit in its count. The state is kept for `keep` (twice, from its start).
local function sliding_window(key, limit, cs, ce, ps, ws, keep, back, over)
  local st = load(key, 3)
  local start, prev, curr = st[1], st[2], st[3]
  if back > 0 then
    if start == cs then
      curr = max(curr - back, 0)
    elseif start == ce then
      prev = max(prev - back, 0)
    end
  else
    if start == ps then
      start, prev, curr = ws, curr, 0
    elseif start < ws then
      start, prev, curr = ws, 0, 0
    end
    curr = max(curr, min(curr + over, 2 * limit))
  end
  save(key, 3, { start, prev, curr }, keep)
end

-- GCRA {tat, ...}: moved back by the units, never before the charge; or on, up to
-- now + 2 * capacity * t. A key's holds (common.lua) stay exactly as they are: none is reaped
-- or changed here, and the state keeps them (and its expiry covers them).
local function gcra(key, capacity, t, charged, back, over)
  local hkey = key .. ':h' -- same slot as key: see common.lua
  local st = gcra_load(key)
  -- Holds that ended are counted first, at their ends, as any other call on the key does.
  gcra_reap(hkey, st, t)
  local tat = st[1]
  if back > 0 then
    if tat > charged then
      tat = max(tat - back * t, charged)
    end
  else
    tat = max(tat, min(max(tat, now) + over * t, now + 2 * capacity * t))
  end
  st[1] = tat
  gcra_save(key, hkey, st, t)
end

-- Sliding log: while the charge is in the window, removes `back` members stamped at charged or
-- later, the earliest first (of one time, the highest-numbered, so each time's members stay
-- `time:0` .. `time:(k-1)`); charged: members at now (no earlier than the newest), up to
-- `limit` live members.
local function sliding_log(key, limit, w, charged, back, over)
  if back > 0 then
    if charged + w <= now then
      return
    end
    local from = fmt(charged)
    while back > 0 do
      local first = redis.call('ZRANGEBYSCORE', key, from, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
      if not first[2] then
        return
      end
      local score = first[2]
      local k = redis.call('ZCOUNT', key, score, score)
      local n = min(k, back)
      for i = k - 1, k - n, -1 do
        redis.call('ZREM', key, score .. ':' .. fmt(i))
      end
      back = back - n
      from = '(' .. score
    end
  else
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - w))
    local n = min(over, limit - redis.call('ZCARD', key))
    if n > 0 then
      local at = log_newest(key)
      if not at or at < now then
        at = now
      end
      log_add(key, at, n, w)
    end
  end
end

local applied = 0
for i = 1, #KEYS do
  local key = KEYS[i]
  local base = 3 + 7 * (i - 1)
  local algo = tonumber(ARGV[base])
  local a, b = tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2])
  local charged, back, over = tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5]), tonumber(ARGV[base + 6])
  if back > 0 or over > 0 then
    if algo == 1 then
      local _, rc = divmod(charged, b)
      local _, rn = divmod(now, b)
      fixed_window(key, a, charged - rc, now - rn, b, back, over)
    elseif algo == 5 then
      local bounds, keep = calendar_bounds(ARGV[base + 3], 3, 1)
      if not bounds then
        return redis.error_reply('sluice: bad calendar bounds ' .. tostring(ARGV[base + 3]))
      end
      fixed_window(key, a, b, bounds[1], keep, back, over)
    elseif algo == 6 then
      local bounds, keep = calendar_bounds(ARGV[base + 3], 5, 2)
      local charge = split(ARGV[base + 2], 2)
      if not bounds or not charge then
        return redis.error_reply('sluice: bad calendar bounds ' .. tostring(ARGV[base + 3]))
      end
      sliding_window(key, a, charge[1], charge[2], bounds[1], bounds[2], keep, back, over)
    elseif algo == 2 then
      sliding_log(key, a, b, charged, back, over)
    elseif algo == 3 then
      local _, rc = divmod(charged, b)
      local _, rn = divmod(now, b)
      local cs, ws = charged - rc, now - rn
      sliding_window(key, a, cs, cs + b, ws - b, ws, b, back, over)
    elseif algo == 4 then
      gcra(key, a, b, charged, back, over)
    else
      return redis.error_reply('sluice: unknown algorithm ' .. tostring(ARGV[base]))
    end
  end
  applied = applied + 1
end
return applied

-- sluice: decide every limit of one request, all or nothing, in one call.
--
-- KEYS[i]       the stored key of check i (prefix:policy:fingerprint:{hash})
-- ARGV[1], ARGV[2]  now and the expiry grace (common.lua)
-- ARGV[3+5(i-1) .. 7+5(i-1)]  check i: algorithm, a, b, c, cost
-- ARGV[3+5n]    `peek` to decide without charging (optional)
--     1 fixed window    a = limit, b = window (us)
--     2 sliding log     a = limit, b = window (us)
--     3 sliding window  a = limit, b = window (us)
--     4 GCRA bucket     a = capacity, b = interval (us per token), c = requests passed without
--                       delay when shaping, or -1 to police; the units a policing bucket holds
--                       for quota leases (hold.lua; layout in common.lua) are not there to take
--     5 calendar window a = limit, b = 0 (settle.lua's), c = `start:end:next`, the bounds (us) of
--                       the caller's window and the next (common.lua's calendar_bounds)
--     6 calendar sliding window  a = limit, b = `0:0` (settle.lua's), c =
--                       `previous:start:end:next:after`, the caller's window and one more on
--                       each side
--
-- Returns {now, then per check: allowed (1/0), remaining, reset_after (us), retry_after (us),
-- retry_after's extra nanoseconds (0..999, sliding window only), delay (us)}.
--
-- Every rule mirrors sluice-core exactly, in microseconds. Runs after common.lua.

-- Fixed window: state {start, count}, in the window that begins at ws and lasts w (a state of
-- a later window, from a clock that stepped back, keeps counting: the strict direction).
local function fixed_window(key, limit, ws, w, cost)
  local st = load(key, 2)
  local start, count = st[1], st[2]
  if not (count > 0 and start >= ws) then
    start, count = ws, 0
  end
  local until_end = start + w - now
  if until_end < 0 then
    until_end = 0
  end
  local allowed = count + cost <= limit
  local after = count
  if allowed then
    after = count + cost
  end
  local reset, retry = 0, 0
  if after > 0 then
    reset = until_end
  end
  if not allowed then
    retry = until_end
  end
  if allowed then
    states[key], kinds[key] = { start, after }, 1
  end
  local remaining = limit - after
  if remaining < 0 then
    remaining = 0 -- a debt (settle.lua) counts beyond the limit
  end
  return allowed, remaining, reset, retry, 0, 0
end

-- Sliding window counter: state {start, prev, curr}.

-- Smallest elapsed time e (as whole us, extra ns) at which floor(p * (W - e) / W) <= k, with
-- W = w in nanoseconds: e = W - min(floor(((k + 1) * W - 1) / p), W).
local function earliest(p, k, w)
  if p == 0 then
    return 0, 0
  end
  local a = k + 1
  if a > p then
    return 0, 0
  end
  local q, r = muldivmod(a, w, p) -- q <= w because a <= p
  if q == w and r > 0 then
    return 0, 0
  end
  if r == 0 then
    return w - q, 1
  end
  local s = divmod(1000 * r - 1, p) -- 0 <= s <= 999
  if s == 0 then
    return w - q, 0
  end
  return w - q - 1, 1000 - s
end

-- (us, ns) at - now, floored at zero.
local function after_now(at_us, at_ns)
  local d = at_us - now
  if d < 0 then
    return 0, 0
  end
  return d, at_ns
end

-- The windows are [ps, ws) (the previous), [ws, we) (now's) and [we, ne) (the next).
local function sliding_window(key, limit, ps, ws, we, ne, cost)
  local st = load(key, 3)
  local start, prev, curr = st[1], st[2], st[3]
  local w = we - ws
  if start == ws then
    -- the same window
  elseif start == ps then
    start, prev, curr = ws, curr, 0
  elseif start < ws then
    start, prev, curr = ws, 0, 0
  elseif start == we then
    -- The clock stepped back into an earlier window: keep the newer counts, weigh the previous
    -- window fully (the strict direction).
    ws, we, ne, w = we, ne, ne + (ne - we), ne - we
  else
    ws, we, ne = start, start + w, start + 2 * w
  end
  local elapsed = now - ws
  if elapsed < 0 then
    elapsed = 0
  elseif elapsed > w then
    elapsed = w
  end
  local est = muldivmod(prev, w - elapsed, w) + curr
  local allowed = est + cost <= limit
  local curr_after, used = curr, est
  if allowed then
    curr_after, used = curr + cost, est + cost
  end
  local remaining = limit - used
  if remaining < 0 then
    remaining = 0
  end
  local reset = 0
  if curr_after > 0 then
    reset = ne - now
  elseif prev > 0 then
    reset = we - now
  end
  if reset < 0 then
    reset = 0
  end
  local retry_us, retry_ns = 0, 0
  if not allowed then
    local found = false
    if curr + cost <= limit then
      local e_us, e_ns = earliest(prev, limit - curr - cost, w)
      if e_us < w then
        found = true
        if e_us < elapsed or (e_us == elapsed and e_ns == 0) then
          e_us, e_ns = elapsed, 0
        end
        retry_us, retry_ns = after_now(ws + e_us, e_ns)
      end
    end
    if not found then
      local next_w = ne - we
      local e_us, e_ns = earliest(curr, limit - cost, next_w)
      if e_us < next_w then
        retry_us, retry_ns = after_now(we + e_us, e_ns)
      else
        retry_us, retry_ns = after_now(ne, 0)
      end
    end
  end
  if allowed then
    states[key], kinds[key] = { start, prev, curr_after }, 3
  end
  return allowed, remaining, reset, retry_us, retry_ns, 0
end

-- GCRA (token bucket, leaky bucket): state {tat, held, next, earliest, latest} (common.lua's
-- gcra_load; a key without holds is {tat, 0, 0, 0, 0} and decides as it always has). The
-- holds that ended by now are reaped first; then held units are taken out of what the request
-- sees: admitted iff max(tat, now) + (cost + held) x t - now <= tau. A request that cannot fit
-- beside the holds (cost + held > capacity) waits for the first hold's end. The holds reaped
-- are written also when the request charges nothing (denied, or a peek): a settlement after
-- it finds them reaped, as it would after an admission.
-- Holds reaped are written even when nothing is charged (a denial, a peek): `reaped` keeps the
-- state as the reap left it, before any charge.
local reaped = {}

local function gcra(key, capacity, t, free, cost)
  local st = gcra_load(key)
  if st[2] > 0 then
    gcra_reap(key .. ':h', st, t) -- same slot as key: see common.lua
    if st.gone and #st.gone > 0 and not reaped[key] then
      reaped[key] = { st[1], st[2], st[3], st[4], st[5], gone = st.gone, t = t }
    end
  end
  local tat, held_units = st[1], st[2]
  local tau = capacity * t
  local start = tat
  if start < now then
    start = now
  end
  local new_tat = start + cost * t
  local allowed = new_tat + held_units * t - now <= tau
  local held = start - now
  if allowed then
    held = new_tat - now
  end
  local delay = 0
  if allowed and free >= 0 then
    delay = (start - now) - free * t
    if delay < 0 then
      delay = 0
    end
  end
  local remaining = gcra_beside(tau - held, t, held_units)
  local retry = 0
  if not allowed then
    if cost + held_units > capacity then
      retry = st[4] - now
    else
      retry = new_tat + held_units * t - now - tau
    end
  end
  if allowed then
    st[1] = new_tat
    states[key], kinds[key] = st, 4
  end
  return allowed, remaining, held, retry, 0, delay
end

-- Sliding log (common.lua), plus the entries this request would add, all at one time `at`.
local pending = {}

local function newest(key)
  local p = pending[key]
  if p then
    return p.at
  end
  return log_newest(key)
end

local function sliding_log(key, limit, w, cost)
  local p = pending[key]
  local added = 0
  if p then
    added = p.n
  end
  local floor_excl = '(' .. fmt(now - w)
  local stored = redis.call('ZCOUNT', key, floor_excl, '+inf')
  local live = stored + added
  local allowed = live + cost <= limit
  local after = live
  if allowed then
    after = live + cost
  end
  -- The log is empty again when its newest entry leaves the window; an admitted request is
  -- recorded no earlier than the newest entry already held.
  local reset, retry = 0, 0
  if after > 0 then
    local t = newest(key)
    if allowed and cost > 0 and (not t or t < now) then
      t = now
    end
    if t then
      reset = t + w - now
      if reset < 0 then
        reset = 0
      end
    end
  end
  if not allowed then
    local must_leave = live + cost - limit
    local t
    if must_leave <= stored then
      local e = redis.call('ZRANGEBYSCORE', key, floor_excl, '+inf', 'WITHSCORES', 'LIMIT', must_leave - 1, 1)
      t = tonumber(e[2])
    else
      t = p.at
    end
    retry = t + w - now
    if retry < 0 then
      retry = 0
    end
  end
  if allowed and cost > 0 then
    local at = newest(key)
    if not at or at < now then
      at = now
    end
    pending[key] = { n = added + cost, at = at, w = w }
    kinds[key] = 2
  end
  return allowed, limit - after, reset, retry, 0, 0
end

local function commit_log(key)
  local p = pending[key]
  log_add(key, p.at, p.n, p.w)
end

local out = { now }
local all = true
local windows = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local base = 3 + 5 * (i - 1)
  local algo = tonumber(ARGV[base])
  local a, b, c = tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3]) -- b, c: nil for 5, 6
  local cost = tonumber(ARGV[base + 4])
  local allowed, remaining, reset, retry_us, retry_ns, delay
  if algo == 1 then
    local _, r = divmod(now, b)
    allowed, remaining, reset, retry_us, retry_ns, delay = fixed_window(key, a, now - r, b, cost)
    windows[key] = b
  elseif algo == 5 or algo == 6 then
    local n, mine = 3, 1
    if algo == 6 then
      n, mine = 5, 2
    end
    local bounds, keep = calendar_bounds(ARGV[base + 3], n, mine)
    if not bounds then
      return redis.error_reply('sluice: bad calendar bounds ' .. tostring(ARGV[base + 3]))
    end
    if algo == 5 then
      allowed, remaining, reset, retry_us, retry_ns, delay =
        fixed_window(key, a, bounds[1], bounds[2] - bounds[1], cost)
    else
      allowed, remaining, reset, retry_us, retry_ns, delay =
        sliding_window(key, a, bounds[1], bounds[2], bounds[3], bounds[4], cost)
    end
    windows[key] = keep
  elseif algo == 2 then
    allowed, remaining, reset, retry_us, retry_ns, delay = sliding_log(key, a, b, cost)
  elseif algo == 3 then
    local _, r = divmod(now, b)
    local ws = now - r
    allowed, remaining, reset, retry_us, retry_ns, delay = sliding_window(key, a, ws - b, ws, ws + b, ws + 2 * b, cost)
    windows[key] = b
  elseif algo == 4 then
    allowed, remaining, reset, retry_us, retry_ns, delay = gcra(key, a, b, c, cost)
    windows[key] = b
  else
    return redis.error_reply('sluice: unknown algorithm ' .. tostring(ARGV[base]))
  end
  if not allowed then
    all = false
  end
  local n = #out
  out[n + 1] = allowed and 1 or 0
  out[n + 2] = remaining
  out[n + 3] = reset
  out[n + 4] = retry_us
  out[n + 5] = retry_ns
  out[n + 6] = delay
end

if all and ARGV[3 + 5 * #KEYS] ~= 'peek' then
  for key, kind in pairs(kinds) do
    if kind == 2 then
      commit_log(key)
    elseif kind == 4 then
      gcra_save(key, key .. ':h', states[key], windows[key])
    else
      save(key, kind, states[key], windows[key])
    end
  end
else
  for key, st in pairs(reaped) do
    gcra_save(key, key .. ':h', st, st.t)
  end
end

return out

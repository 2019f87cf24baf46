-- sluice: hold a policing bucket's units for a quota lease, or release a hold, in one call.
-- Runs after common.lua, whose GCRA section describes the state and its holds.
--
-- KEYS[1]       the stored key of the check (prefix:policy:fingerprint:{hash})
-- KEYS[2]       its holds' hash, KEYS[1] .. ':h' (the same `{hash}` tag: the same slot)
-- ARGV[1], ARGV[2]  now and the expiry grace (common.lua)
-- ARGV[3]       `hold` or `release`
-- ARGV[4], ARGV[5]  the bucket: capacity, interval t (us per token); it polices
-- hold:    ARGV[6] units, ARGV[7] life (us)
-- release: ARGV[6] id, ARGV[7] units spent of the hold
-- renew:   ARGV[6] units, ARGV[7] life (us), ARGV[8] id, ARGV[9] units spent of it: a release
--          of hold id, then a hold, in one call (a lease that ran out taking the next)
--
-- hold (and renew) returns {now, granted (1/0), id (0 when refused), remaining, reset_after (us),
-- retry_after (us)}: granted iff max(tat, now) + (units + held) x t - now <= capacity x t, after
-- the holds that ended by now are reaped; a granted hold takes the key's next id (never below now in us) and lasts
-- until now + life (one of no units is not recorded); tat is unchanged. remaining is what is left beside every hold (after the
-- units, when granted); retry_after, when refused, as the decision script's at cost = units.
--
-- release returns {now, released (1/0)}: after reaping, a hold still there is removed, and the
-- units spent of it (at most its units) are charged now, tat = max(tat, now) + spent x t. A hold
-- reaped already (counted as spent at its end) or unknown is left alone.

local key, hkey = KEYS[1], KEYS[2]
local op = ARGV[3]
local capacity, t = tonumber(ARGV[4]), tonumber(ARGV[5])
local tau = capacity * t

local st = gcra_load(key)
gcra_reap(hkey, st, t)
local reaped = st.gone and #st.gone > 0

-- The bucket's own backlog start: max(tat, now).
local function start_of()
  if st[1] < now then
    return now
  end
  return st[1]
end

-- Sets `units` apart until now + life when they fit beside every hold: the hold script's
-- answer after `now`, and whether it was granted.
local function hold(units, life)
  local held, start = st[2], start_of()
  local granted = start + (units + held) * t - now <= tau
  local remaining, retry, id = 0, 0, 0
  if granted then
    remaining = gcra_beside(tau - (start - now) - units * t, t, held)
    -- The next id, and no earlier than now (us): ids only grow, even across a state that
    -- expired and started again, so a release that comes after its hold ended and the key was
    -- forgotten never ends a newer hold.
    id = st[3] + 1
    if id < now then
      id = now
    end
    st[3] = id
    -- A hold of no units holds nothing: it takes an id, and leaves no record to reap.
    if units > 0 then
      local ends = now + life
      st[2] = held + units
      if st[4] == 0 or ends < st[4] then
        st[4] = ends
      end
      if ends > st[5] then
        st[5] = ends
      end
      st.added = { id, units, ends }
    end
  else
    remaining = gcra_beside(tau - (start - now), t, held)
    if units + held > capacity then
      retry = st[4] - now
    else
      retry = start + (units + held) * t - now - tau
    end
  end
  return { granted and 1 or 0, id, remaining, start - now, retry }, granted
end

-- Ends hold `id`, `spent` of it charged now: whether it was there to end.
local function release(id, spent)
  local held = st[2]
  -- A record that ended by now was just reaped (its deletion waits for the write).
  local h = held > 0 and redis.call('HGET', hkey, fmt(id))
  h = h and split(h, 2)
  if not (h and h[2] > now) then
    return false
  end
  local gone = st.gone or {}
  gone[#gone + 1] = id
  st.gone = gone
  local held_after = held - h[1]
  if held_after < 0 then
    held_after = 0
  end
  st[2] = held_after
  if spent > h[1] then
    spent = h[1]
  end
  if spent > 0 then
    st[1] = start_of() + spent * t
  end
  -- The first and last ends of the holds left (the hash, without this one).
  local earliest, latest = 0, 0
  if held_after > 0 then
    local _
    _, _, earliest, latest = gcra_holds(redis.call('HGETALL', hkey), id)
  end
  st[4], st[5] = earliest, latest
  return true
end

if op == 'hold' or op == 'renew' then
  local released = false
  local units, life = tonumber(ARGV[6]), tonumber(ARGV[7])
  if op == 'renew' then
    released = release(tonumber(ARGV[8]), tonumber(ARGV[9]))
  end
  local answer, granted = hold(units, life)
  if granted or released or reaped then
    gcra_save(key, hkey, st, t)
  end
  table.insert(answer, 1, now)
  return answer
elseif op == 'release' then
  local released = release(tonumber(ARGV[6]), tonumber(ARGV[7]))
  if released or reaped then
    gcra_save(key, hkey, st, t)
  end
  return { now, released and 1 or 0 }
end
return redis.error_reply('sluice: unknown hold operation ' .. tostring(op))

-- tollgate: one admission decision, atomically, on the server's clock.
--
-- This chunk defines `admit(keys, args)`; tollgate appends either
-- `redis.register_function(<name>, admit)` (loaded with FUNCTION LOAD, called with FCALL:
-- Redis 7 and later) or `return admit(KEYS, ARGV)` (EVALSHA, older servers).
--
-- keys[1]  identity, struct-packed '<dddddd' (48 bytes): burst TAT, sustained TAT, the expiry
--          last set (ms), the burst and sustained emission intervals the TATs are counted in
--          (us), and when it was last charged (us). Read too: the previous versions' '<ddd'
--          (24 bytes, no intervals) and text "<burst TAT>:<sustained TAT>", counted in the
--          current intervals
-- keys[2]  the shard's capacity hash (only with capacity): 'e' window end (us), 's' the shard's
--          count, and per tenant digest the tenant's count, all for the window ending at 'e'
-- args[1]  the route class's constants, "bt btau st stau margin window slots cap": emission
--          interval and tolerance (tau = t * tokens) of the burst and sustained buckets (us),
--          the expiry margin (ms), the capacity window (us, 0 for none), a shard's slots per
--          window and the tenant's cap of those. Parsed once per distinct string and cached
--          (functions only; EVALSHA parses it every call)
-- args[2]  tokens to charge, the request's cost n (weighted cost; the worker refuses a cost
--          larger than a bucket before calling, `Decision::Exceeds`), or "0" to only look
--          (peek: checked as for one token, nothing written)
-- args[3]  deadline (us since the Unix epoch, the server's clock): a charging call that runs
--          later charges nothing, its caller has already given up; "0" for none
-- args[4]  when this worker's profile took effect (us since the Unix epoch, the server's
--          clock as the worker estimates it; see "Reloads" below)
-- args[5]  the tenant's field in keys[2] (only with capacity)
--
-- Returns { outcome, wait_us, now_us }: outcome is tollgate's `Outcome::index` (0 admit,
-- 1 throttle (burst), 2 throttle (sustained), 3 tenant share used, 4 shard full) or 255
-- (expired: past the deadline, nothing read or written); wait_us the exact wait, or for an
-- admission the burst's debt after it (its TAT minus now, for the near-limit count).
--
-- Cost: every redis.call, argument and number parsed (strtod) is a measurable part of a
-- decision (`cargo bench --features redis --bench redis_cost`), so an admit makes four calls
-- (TIME, GET, SET, and HMGET + HSET with capacity), a refusal two, and the identity's expiry
-- is rewritten only when it falls short (SET .. KEEPTTL otherwise, half the cost of PXAT).
-- A value in the current intervals is not converted (two compares; args[4] is not parsed).
--
-- Reloads: a debt carries over in tokens, as in the embedded limiter (`Limiter::reload`). A
-- value counted in other intervals than the class's current ones (another profile's) is
-- converted when it is read: what each bucket owes at the conversion instant `at`, `tat - at`
-- us of the stored interval, is owed in as many tokens of the current one, rounded up to a
-- whole microsecond (a conversion never grants; the embedded limiter rounds to a nanosecond, so
-- its waits rounded up are these) and capped at 2^56 ns (`owed`); a bucket full at `at` stays
-- as it is. `at` is the later of args[4] (the reload) and the value's last charge, and never later
-- than now: the stored TATs describe the bucket at the old rate up to its last charge, so a
-- conversion never counts as debt an instant the bucket was full (a worker still on the old
-- profile may have charged it after another worker's reload). A refusal or a peek converts
-- without writing (the result depends on `at`, not on when it is made); an admission writes
-- the converted TATs with the current intervals. So a key's debt drains at the rate it was
-- charged at until the reload (or until its last charge under the old profile), then at the
-- new one; a key not charged between two reloads is converted once, from the intervals it was
-- charged in to the current ones (the embedded limiter converts through each profile).
--
-- Numbers: Lua numbers are doubles, exact for integers below 2^53. Every value here is an
-- integer below 2^53: now is about 1.8e15 us in 2026 (2^53 us is the year 2255), t and tau are
-- at most 366 days plus 2^32 us (3.2e13), a TAT at most now + DEBT_CAP (7.2e13, a converted
-- debt) + the largest tau of the profiles that charged it, a window end at most now + window,
-- counts at most 2^24, a cost t * n at most tau (n is at most the bucket's tokens). Sums,
-- differences, comparisons and math.fmod of such integers are exact, and '<d' stores them exactly. The
-- divisions by 1000 (us to ms) and 8000 only place an expiry: floor(m / 1000) is never below
-- the true quotient's floor (rounding is monotonic and integers are representable), so an
-- expiry is never early. Milliseconds (about 1.8e12) print whole with tostring (14 digits); the
-- window end in microseconds is written with '%.0f'. A conversion's product `debt * t` may
-- pass 2^53, so `owed` computes it exactly in parts below 2^48 (a debt is at most
-- DEBT_CAP + tau, 1.1e14 < 2^47, and an interval at most 3.2e13 < 2^45).

-- The embedded limiter's cap on a converted debt, 2^56 ns, rounded up to whole microseconds
-- (as every converted debt is).
local DEBT_CAP = 72057594037928

local cache, cached = {}, 0

-- The class constants of args[1] as numbers; at most 256 distinct strings are kept (a fleet has
-- a handful, one per route class and profile), then the cache starts over.
local function constants(s)
  local p = cache[s]
  if p then
    return p
  end
  p = {}
  for x in string.gmatch(s, '%d+') do
    p[#p + 1] = tonumber(x)
  end
  if #p ~= 8 then
    return redis.error_reply('tollgate: bad class constants')
  end
  if cached >= 256 then
    cache, cached = {}, 0
  end
  cache[s], cached = p, cached + 1
  return p
end

-- ceil(d * tn / to), capped at DEBT_CAP, exactly: the debt of d us counted in tokens of to us,
-- owed in tokens of tn us (integers, 0 < d <= 2^47, 1 <= tn, to < 2^46). d = q * to + r, so the
-- product over to is q * tn (compared with the cap first) plus r * tn / to, r < to: that one by
-- long multiplication, a bit of tn at a time, keeping quotient and remainder of r * 2^i by to
-- (every partial sum below 3 * to).
local function owed(d, to, tn)
  local r = math.fmod(d, to)
  local whole = (d - r) / to * tn
  if whole >= DEBT_CAP then
    return DEBT_CAP
  end
  local q, rem, pq, pr = 0, 0, 0, r
  while tn > 0 and pr + pq > 0 do
    local bit = math.fmod(tn, 2)
    if bit == 1 then
      q, rem = q + pq, rem + pr
      if rem >= to then
        q, rem = q + 1, rem - to
      end
    end
    tn = (tn - bit) / 2
    pq, pr = pq * 2, pr * 2
    if pr >= to then
      pq, pr = pq + 1, pr - to
    end
  end
  if rem > 0 then
    q = q + 1
  end
  whole = whole + q
  if whole > DEBT_CAP then
    return DEBT_CAP
  end
  return whole
end

-- Whether the numbers of a stored value are ones tollgate writes: finite (a NaN is not equal to
-- itself). A value with any other (written by someone else) reads as absent, as a value that
-- does not parse does: NaN TATs would admit everything and be written back.
local function finite(a, b, c)
  return a == a and b == b and c == c and a > -math.huge and a < math.huge
    and b > -math.huge and b < math.huge and c > -math.huge and c < math.huge
end

-- A TAT counted in tokens of `from` us as one counted in tokens of `to` us, converted at `at`.
local function convert(tat, from, to, at)
  if tat <= at or from == to then
    return tat
  end
  return at + owed(tat - at, from, to)
end

local function admit(keys, args)
  if keys[2] then
    if keys[2] == keys[1] then
      return redis.error_reply("ERR tollgate: the identity's key and the capacity key must differ")
    end
    if args[5] == 'e' or args[5] == 's' then
      return redis.error_reply("ERR tollgate: the tenant's field cannot be 'e' or 's', the window's own")
    end
  end
  local t = redis.call('TIME')
  local now = t[1] * 1000000 + t[2]
  local n = tonumber(args[2])
  -- A call queued behind a stalled server (or a slow script) whose caller timed out: charge
  -- nothing, neither buckets nor shared counts.
  if n > 0 then
    local deadline = tonumber(args[3])
    if deadline > 0 and now > deadline then
      return { 255, 0, now }
    end
  end
  local p = constants(args[1])
  if p.err then
    return p
  end
  local c = n > 0 and n or 1

  -- Both buckets (GCRA). A missing key is a full bucket (TAT = now). A debt is never
  -- clamped, and nothing a refusal sees is ever written, so no sequence of reloads grants a
  -- token twice (see "Reloads").
  local tb, ts, exp = now, now, 0
  local v = redis.call('GET', keys[1])
  if v then
    if #v == 48 then
      local fb, fs, at
      tb, ts, exp, fb, fs, at = struct.unpack('<dddddd', v)
      if not (finite(tb, ts, exp) and finite(fb, fs, at) and fb >= 1 and fs >= 1) then
        tb, ts, exp = now, now, 0
      elseif fb ~= p[1] or fs ~= p[3] then
        at = math.min(math.max(tonumber(args[4]), at), now)
        tb, ts = convert(tb, fb, p[1], at), convert(ts, fs, p[3], at)
      end
    elseif #v == 24 then
      tb, ts, exp = struct.unpack('<ddd', v)
      if not finite(tb, ts, exp) then
        tb, ts, exp = now, now, 0
      end
    else
      local a, b = string.match(v, '^(%d+):(%d+)$')
      if a then
        tb, ts = tonumber(a), tonumber(b)
        if not finite(tb, ts, 0) then
          tb, ts = now, now
        end
      end
    end
    if tb < now then
      tb = now
    end
    if ts < now then
      ts = now
    end
  end
  local nb, ns = tb + c * p[1], ts + c * p[3]
  local wb, ws = nb - now - p[2], ns - now - p[4]
  if wb > 0 or ws > 0 then
    -- Nothing is charged, nothing is written. The longest wait; a tie names the sustained one.
    if wb > ws then
      return { 1, wb, now }
    end
    return { 2, ws, now }
  end

  -- Shared capacity: fixed windows on the server's clock; the tenant first, then the shard. A
  -- stored window later than ours on the same grid is counted in (the clock stepped back): a
  -- late request never resets a newer window.
  local window = p[6]
  local e, sc, tc, fresh
  if window > 0 then
    local wend = now - math.fmod(now, window) + window
    local r = redis.call('HMGET', keys[2], 'e', 's', args[5])
    e = tonumber(r[1])
    if e and e >= wend and math.fmod(e, window) == 0 then
      sc, tc = tonumber(r[2]) or 0, tonumber(r[3]) or 0
    else
      e, sc, tc, fresh = wend, 0, 0, true
    end
    if tc + c > p[8] then
      return { 3, wend - now, now }
    end
    if sc + c > p[7] then
      return { 4, wend - now, now }
    end
  end

  if n > 0 then
    -- The key must outlive the instant both buckets are full again (`need`, in ms). Its expiry
    -- is set to that plus the margin plus an eighth of the time left, and rewritten only once
    -- a later charge needs more: a key that keeps being charged rarely pays for PXAT.
    local m = nb > ns and nb or ns
    local need = math.floor(m / 1000) + 1
    if exp >= need then
      redis.call('SET', keys[1], struct.pack('<dddddd', nb, ns, exp, p[1], p[3], now), 'KEEPTTL')
    else
      exp = need + p[5] + math.floor((m - now) / 8000)
      redis.call('SET', keys[1], struct.pack('<dddddd', nb, ns, exp, p[1], p[3], now), 'PXAT', tostring(exp))
    end
    if window > 0 then
      if fresh then
        -- A new window: the tenants' counts of an older one go with it.
        redis.call('DEL', keys[2])
        redis.call('HSET', keys[2], 'e', string.format('%.0f', e), 's', tostring(n), args[5], tostring(n))
        redis.call('PEXPIREAT', keys[2], tostring(math.floor(e / 1000) + 1 + p[5]))
      else
        redis.call('HSET', keys[2], 's', tostring(sc + n), args[5], tostring(tc + n))
      end
    end
  end
  -- Admitted: the burst's debt after this request (us), for the near-limit count.
  return { 0, nb - now, now }
end

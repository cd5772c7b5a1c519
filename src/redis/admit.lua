-- tollgate: one admission decision, atomically, on the server's clock.
--
-- KEYS[1]  identity: "<burst TAT>:<sustained TAT>" (microseconds since the Unix epoch)
-- KEYS[2]  tenant's count in its shard's window: "<window end>:<count>" (only with capacity)
-- KEYS[3]  shard's count in the window:           "<window end>:<count>" (only with capacity)
-- ARGV[1]  "1" to charge (admit), "0" to only look (peek)
-- ARGV[2]  burst emission interval t (us)      ARGV[3]  burst tolerance tau = t * tokens (us)
-- ARGV[4]  sustained t (us)                    ARGV[5]  sustained tau (us)
-- ARGV[6]  capacity window (us), "0" for no shared capacity
-- ARGV[7]  slots per shard per window          ARGV[8]  the tenant's cap of those slots
-- ARGV[9]  extra milliseconds a key lives after it stops mattering
-- ARGV[10] deadline (us since the Unix epoch, the server's clock): a charging call that runs
--          later charges nothing, its caller has already given up; "0" for none
-- ARGV[11] the request's cost n in tokens and slots (weighted cost), at least 1; the worker
--          refuses a cost larger than a bucket before calling (`Decision::Exceeds`)
--
-- Returns { outcome, wait_us, now_us }: outcome is tollgate's `Outcome::index` (0 admit,
-- 1 throttle (burst), 2 throttle (sustained), 3 tenant share used, 4 shard full) or 255
-- (expired: past the deadline, nothing read or written); wait_us the exact wait (0 for admit).
--
-- Numbers: Lua numbers are doubles, exact for integers below 2^53. Every value here is an
-- integer below 2^53: now is about 1.8e15 us in 2026 (2^53 us is the year 2255), t and tau are
-- at most 366 days plus 2^32 us (3.2e13), a TAT at most now + the largest tau of the profiles
-- that charged it, a window end at most now + window, counts at most 2^24, a cost t * n at
-- most tau (n is at most the bucket's tokens). Sums, differences and comparisons of such integers are
-- exact, and so is math.fmod (the window's start). The one inexact division turns an expiry
-- into whole milliseconds, rounded up by one and padded by the margin: it decides nothing.
-- Integers are written back with '%.0f', which prints them whole (tostring would cut them to
-- 14 significant digits).

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local write = ARGV[1] == '1'
local bt, btau = tonumber(ARGV[2]), tonumber(ARGV[3])
local st, stau = tonumber(ARGV[4]), tonumber(ARGV[5])
local margin = tonumber(ARGV[9])
local deadline = tonumber(ARGV[10])
local n = tonumber(ARGV[11])

-- A call queued behind a stalled server (or a slow script) whose caller timed out: charge
-- nothing, neither buckets nor shared counts.
if write and deadline > 0 and now > deadline then
  return { 255, 0, now }
end

local function pair(key)
  local v = redis.call('GET', key)
  if v then
    local a, b = string.match(v, '^(%d+):(%d+)$')
    if a then
      return tonumber(a), tonumber(b)
    end
  end
  return nil, nil
end

-- Stores "a:b" until `expires_at` (us) has passed, plus the margin.
local function store(key, a, b, expires_at)
  local ms = math.max(math.floor((expires_at - now) / 1000), 0) + 1 + margin
  redis.call('SET', key, string.format('%.0f:%.0f', a, b), 'PX', string.format('%.0f', ms))
end

-- Both buckets (GCRA). A missing key is a full bucket (TAT = now). The stored TATs are used as
-- they are, after a reload too (no clamp): a debt carries over in full and nothing a refusal
-- sees is ever written, so no sequence of reloads grants a token twice.
local rb, rs = pair(KEYS[1])
local tb = rb or now
local ts = rs or now
local nb = math.max(tb, now) + bt * n
local ns = math.max(ts, now) + st * n
local wb = nb - (now + btau)
local ws = ns - (now + stau)
if wb > 0 or ws > 0 then
  -- Nothing is charged, nothing is written.
  -- The longest wait; a tie names the sustained bucket.
  if wb > ws then
    return { 1, wb, now }
  end
  return { 2, ws, now }
end

-- Shared capacity: fixed windows on the server's clock; the tenant first, then the shard. A
-- stored window later than ours on the same grid is counted in (the clock stepped back): a
-- late request never resets a newer window.
local window = tonumber(ARGV[6])
local te, tc, se, sc
if window > 0 then
  local wend = now - math.fmod(now, window) + window
  local function counted(key)
    local e, c = pair(KEYS[key])
    if e and e >= wend and math.fmod(e, window) == 0 then
      return e, c
    end
    return wend, 0
  end
  te, tc = counted(2)
  if tc + n > tonumber(ARGV[8]) then
    return { 3, wend - now, now }
  end
  se, sc = counted(3)
  if sc + n > tonumber(ARGV[7]) then
    return { 4, wend - now, now }
  end
end

if write then
  store(KEYS[1], nb, ns, math.max(nb, ns))
  if window > 0 then
    store(KEYS[2], te, tc + n, te)
    store(KEYS[3], se, sc + n, se)
  end
end
return { 0, 0, now }

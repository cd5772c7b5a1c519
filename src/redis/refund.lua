-- tollgate: gives back what one admitted call of admit.lua charged, when a later key of the
-- same request was refused (`admit_all`: all or nothing across keys).
--
-- This chunk defines `refund(keys, args)`; tollgate registers it in the same function library
-- as admit.lua (FCALL) or appends `return refund(KEYS, ARGV)` (EVALSHA, older servers).
--
-- keys     as admit.lua: identity (packed TATs), then (only with capacity) the shard's hash
-- args[1]  burst cost t * n (us)                 args[2]  sustained cost t * n (us)
-- args[3]  the window end the slots were counted in, "0" for no shared capacity
-- args[4]  n, the slots to give back             args[5]  the tenant's field (with capacity)
--
-- Exact for the buckets: the charge moved each TAT to max(tat, now) + cost and this moves it
-- back by the cost; charges in between commute with it. A value that says which intervals it
-- is counted in (48 bytes, see admit.lua) gets back n tokens of those: a reload between the
-- charge and the refund converted the charge's tokens too. Older values (no intervals) get
-- back the costs in args[1] and args[2], the worker's current intervals. n * t may pass 2^53
-- only where it is larger than the TAT (a tiny interval's n against a huge one's value): the
-- result is 0 then all the same. Counts are given back only while the
-- hash still counts that window ('e'): once a newer window began, the old one's slots admit no
-- one, and giving them back in the new one would hand them out twice. Expiries are kept (the
-- stored one, and KEEPTTL): an earlier TAT only makes a key matter for less time. Numbers as
-- in admit.lua.

-- Whether the numbers of a stored value are ones tollgate writes (admit.lua's `finite`): a value
-- with any other reads as absent, and nothing is given back to it.
local function refundable(a, b, c)
  return a == a and b == b and c == c and a > -math.huge and a < math.huge
    and b > -math.huge and b < math.huge and c > -math.huge and c < math.huge
end

local function refund(keys, args)
  if keys[2] then
    if keys[2] == keys[1] then
      return redis.error_reply("ERR tollgate: the identity's key and the capacity key must differ")
    end
    if args[5] == 'e' or args[5] == 's' then
      return redis.error_reply("ERR tollgate: the tenant's field cannot be 'e' or 's', the window's own")
    end
  end
  local v = redis.call('GET', keys[1])
  if v then
    local n = tonumber(args[4])
    if #v == 48 then
      -- n tokens in the intervals the value is counted in now (a reload, here or at another
      -- worker, may have converted it since the charge).
      local tb, ts, exp, fb, fs, at = struct.unpack('<dddddd', v)
      if refundable(tb, ts, exp) and refundable(fb, fs, at) and fb >= 1 and fs >= 1 then
        tb = math.max(tb - n * fb, 0)
        ts = math.max(ts - n * fs, 0)
        redis.call('SET', keys[1], struct.pack('<dddddd', tb, ts, exp, fb, fs, at), 'KEEPTTL')
      end
    else
      local tb, ts, exp
      if #v == 24 then
        tb, ts, exp = struct.unpack('<ddd', v)
      else
        local a, b = string.match(v, '^(%d+):(%d+)$')
        if a then
          -- The previous version's text: written back packed, with no expiry known (0: the
          -- next charge sets one).
          tb, ts, exp = tonumber(a), tonumber(b), 0
        end
      end
      if tb and refundable(tb, ts, exp) then
        -- No intervals known: counted in the current ones, the costs the worker sent.
        tb = math.max(tb - tonumber(args[1]), 0)
        ts = math.max(ts - tonumber(args[2]), 0)
        redis.call('SET', keys[1], struct.pack('<ddd', tb, ts, exp), 'KEEPTTL')
      end
    end
  end

  local wend, n = tonumber(args[3]), tonumber(args[4])
  if wend > 0 then
    local r = redis.call('HMGET', keys[2], 'e', 's', args[5])
    if tonumber(r[1]) == wend then
      local sc, tc = tonumber(r[2]) or 0, tonumber(r[3]) or 0
      redis.call('HSET', keys[2], 's', tostring(math.max(sc - n, 0)), args[5],
        tostring(math.max(tc - n, 0)))
    end
  end
  return 0
end

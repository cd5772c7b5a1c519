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
-- back by the cost; charges in between commute with it. Counts are given back only while the
-- hash still counts that window ('e'): once a newer window began, the old one's slots admit no
-- one, and giving them back in the new one would hand them out twice. Expiries are kept (the
-- stored one, and KEEPTTL): an earlier TAT only makes a key matter for less time. Numbers as
-- in admit.lua.

local function refund(keys, args)
  local v = redis.call('GET', keys[1])
  if v then
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
    if tb then
      tb = math.max(tb - tonumber(args[1]), 0)
      ts = math.max(ts - tonumber(args[2]), 0)
      redis.call('SET', keys[1], struct.pack('<ddd', tb, ts, exp), 'KEEPTTL')
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

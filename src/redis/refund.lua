-- tollgate: gives back what one admitted call of admit.lua charged, when a later key of the
-- same request was refused (`admit_all`: all or nothing across keys).
--
-- KEYS     as admit.lua: identity, then (only with capacity) the tenant's and the shard's count
-- ARGV[1]  burst cost t * n (us)                ARGV[2]  sustained cost t * n (us)
-- ARGV[3]  the window end the slots were counted in, "0" for no shared capacity
-- ARGV[4]  n, the slots to give back
--
-- Exact for the buckets: the charge moved each TAT to max(tat, now) + cost and this moves it
-- back by the cost; charges in between commute with it. A count is given back only while its
-- key still counts that window: once a newer window began, the old one's slots admit no one,
-- and giving them back in the new one would hand them out twice. Expiries are kept (KEEPTTL):
-- an earlier TAT only makes a key matter for less time. Numbers as in admit.lua.

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

local function put(key, a, b)
  redis.call('SET', key, string.format('%.0f:%.0f', a, b), 'KEEPTTL')
end

local tb, ts = pair(KEYS[1])
if tb then
  put(KEYS[1], math.max(tb - tonumber(ARGV[1]), 0), math.max(ts - tonumber(ARGV[2]), 0))
end

local wend, n = tonumber(ARGV[3]), tonumber(ARGV[4])
if wend > 0 then
  for i = 2, 3 do
    local e, c = pair(KEYS[i])
    if e == wend then
      put(KEYS[i], e, math.max(c - n, 0))
    end
  end
end
return 0

-- Take or extend a session's lease for a node.
-- Succeeds when the lease is free (or expired: the key is gone), already ours, or
-- held by ARGV[3] whose heartbeat KEYS[2] has lapsed (that node is dead).
-- KEYS[1] lease key, KEYS[2] heartbeat key of the holder we saw (or KEYS[1])
-- ARGV[1] our node, ARGV[2] ttl in ms, ARGV[3] holder we saw ('' for none)
local cur = redis.call('GET', KEYS[1])
if (not cur) or cur == ARGV[1]
   or (cur == ARGV[3] and redis.call('EXISTS', KEYS[2]) == 0) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0

-- Take one of a tenant's slots for turns in flight, dropping slots past their deadline.
-- KEYS[1] tenant's in-flight set (turn id -> deadline)
-- ARGV[1] turn id, ARGV[2] limit, ARGV[3] now (s), ARGV[4] deadline (s), ARGV[5] key ttl ms
-- Deadlines are counted from 0: a tenant's set keeps its expiry as a negative score
-- (lua/admit_turn.lua), which is no slot; the TTL is never shortened here.
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, ARGV[3])
if redis.call('ZCOUNT', KEYS[1], 0, '+inf') >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[4], ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[5]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
end
return 1

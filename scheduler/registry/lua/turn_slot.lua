-- Take one of a tenant's slots for turns in flight, dropping slots past their deadline.
-- KEYS[1] tenant's in-flight set (turn id -> deadline)
-- ARGV[1] turn id, ARGV[2] limit, ARGV[3] now (s), ARGV[4] deadline (s), ARGV[5] key ttl ms
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[4], ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[5]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
end
return 1

-- Admit a turn in one round trip: the queue's depth, a tenant slot, the session's
-- turn lock and the turn record (begin_turn), checked in that order, all or nothing.
-- KEYS[1] the queue's list, KEYS[2] tenant's in-flight set (turn id -> deadline),
-- KEYS[3] turn lock, KEYS[4] turn record
-- ARGV[1] turn id, ARGV[2] queue depth limit, ARGV[3] slot limit, ARGV[4] now (s),
-- ARGV[5] deadline (s), ARGV[6] slot set ttl ms, ARGV[7] lock ttl ms, ARGV[8] session id,
-- ARGV[9] record ttl ms
-- Returns {'ok'}, {'backpressure', depth}, {'tenant_limit'} or {'busy'}.
local depth = redis.call('LLEN', KEYS[1])
if depth > tonumber(ARGV[2]) then
  return {'backpressure', depth}
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[4])
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then
  return {'tenant_limit'}
end
if not redis.call('SET', KEYS[3], ARGV[1], 'NX', 'PX', ARGV[7]) then
  return {'busy'}
end
redis.call('HSET', KEYS[4], 'state', 'queued', 'session', ARGV[8], 'attempt', 1,
           'created', ARGV[4], 'node', '')
redis.call('PEXPIRE', KEYS[4], ARGV[9])
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[6]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
end
return {'ok'}

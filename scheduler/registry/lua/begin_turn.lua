-- Take the session alone (close, fork, pause, restore, checkpoint) and record the op as a
-- queued turn, or tell the caller to wait: while the session is held alone, while an
-- earlier caller waits, or while turns are in flight. A waiting caller keeps its place in
-- the session's queue of waiters, so the turns that come after it wait behind it.
-- KEYS[1] the session's alone lock, KEYS[2] turn record, KEYS[3] session's turns in flight,
-- KEYS[4] waiters (ticket -> arrival), KEYS[5] waiters' last ask (ticket -> time)
-- ARGV[1] turn id, ARGV[2] lock ttl ms, ARGV[3] session id, ARGV[4] now, ARGV[5] record ttl ms,
-- ARGV[6] a waiter is dropped after this many seconds without asking
-- Returns 1 (taken) or 0 (wait).
local now = tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[4])
for _, stale in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', tostring(now - tonumber(ARGV[6])))) do
  redis.call('ZREM', KEYS[4], stale)
  redis.call('ZREM', KEYS[5], stale)
end
local first = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
if redis.call('EXISTS', KEYS[1]) == 1 or (first and first ~= ARGV[1])
   or redis.call('ZCARD', KEYS[3]) > 0 then
  redis.call('ZADD', KEYS[4], 'NX', ARGV[4], ARGV[1])
  redis.call('ZADD', KEYS[5], ARGV[4], ARGV[1])
  redis.call('PEXPIRE', KEYS[4], ARGV[2])
  redis.call('PEXPIRE', KEYS[5], ARGV[2])
  return 0
end
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('HSET', KEYS[2], 'state', 'queued', 'session', ARGV[3], 'attempt', 1,
           'created', ARGV[4], 'node', '')
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return 1

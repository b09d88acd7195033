-- Take a session's turn lock and record the turn as queued, or fail if a turn is in flight.
-- KEYS[1] turn lock, KEYS[2] turn record
-- ARGV[1] turn id, ARGV[2] lock ttl ms, ARGV[3] session id, ARGV[4] now, ARGV[5] record ttl ms
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
redis.call('HSET', KEYS[2], 'state', 'queued', 'session', ARGV[3], 'attempt', 1,
           'created', ARGV[4], 'node', '')
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return 1

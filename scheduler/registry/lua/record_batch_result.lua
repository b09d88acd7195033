-- Record one job's result in its batch, exactly once per job id.
-- KEYS[1] batch record, KEYS[2] done set, KEYS[3] results list
-- ARGV[1] job id, ARGV[2] result JSON, ARGV[3] counter field (ok|failed|errors),
-- ARGV[4] finished_at JSON (written when the last job is done)
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then
  return 0
end
redis.call('RPUSH', KEYS[3], ARGV[2])
redis.call('HINCRBY', KEYS[1], ARGV[3], 1)
local total = tonumber(redis.call('HGET', KEYS[1], 'total') or '0')
if redis.call('SCARD', KEYS[2]) >= total then
  redis.call('HSET', KEYS[1], 'state', '"done"', 'finished_at', ARGV[4])
end
return 1

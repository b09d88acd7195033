-- The API re-dispatches a turn whose worker died: attempt N-1 -> N, queued.
-- Refused when the turn is done or abandoned, or another attempt replaced it.
-- KEYS[1] turn record; ARGV[1] the new attempt
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local state = redis.call('HGET', KEYS[1], 'state')
local attempt = tonumber(redis.call('HGET', KEYS[1], 'attempt') or '1')
if (state ~= 'queued' and state ~= 'running') or attempt ~= tonumber(ARGV[1]) - 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'queued', 'attempt', ARGV[1])
redis.call('HDEL', KEYS[1], 'node')
return 1

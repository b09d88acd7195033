-- The API sends a turn again because the process holding it died: attempt N -> N+1.
-- Atomic with what the API saw: refused when the turn is done or abandoned, when
-- another attempt replaced it, or when its holder changed meanwhile (a live
-- process took it: keep waiting for that one).
-- KEYS[1] turn record; ARGV[1] the attempt the API saw, ARGV[2] the holder's
-- incarnation it saw ('' for none)
-- Returns 1 requeued, 0 final or replaced, 2 the holder changed.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local state = redis.call('HGET', KEYS[1], 'state')
local attempt = redis.call('HGET', KEYS[1], 'attempt') or '1'
if (state ~= 'queued' and state ~= 'running') or attempt ~= ARGV[1] then
  return 0
end
if (redis.call('HGET', KEYS[1], 'inc') or '') ~= ARGV[2] then
  return 2
end
redis.call('HSET', KEYS[1], 'state', 'queued', 'attempt', tonumber(ARGV[1]) + 1)
redis.call('HDEL', KEYS[1], 'node', 'inc')
return 1

-- A worker reserved a turn's message (prefetch): note the process that holds it,
-- so that the API watches that process while the turn waits for a thread.
-- Refused (and nothing noted) when the turn is not queued under this attempt.
-- KEYS[1] turn record; ARGV[1] node, ARGV[2] attempt, ARGV[3] incarnation
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local state = redis.call('HGET', KEYS[1], 'state')
local attempt = redis.call('HGET', KEYS[1], 'attempt')
if state ~= 'queued' or attempt ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'node', ARGV[1], 'inc', ARGV[3])
return 1

-- Finish a turn: mark its record done (unless abandoned) and release the session's
-- turn lock if this turn still holds it.
-- KEYS[1] turn lock, KEYS[2] turn record; ARGV[1] turn id
local state = redis.call('HGET', KEYS[2], 'state')
if state and state ~= 'abandoned' then
  redis.call('HSET', KEYS[2], 'state', 'done')
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0

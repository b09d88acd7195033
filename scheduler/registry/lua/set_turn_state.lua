-- Move a turn to a final state (done or abandoned) unless it already has one.
-- KEYS[1] turn record; ARGV[1] new state
local state = redis.call('HGET', KEYS[1], 'state')
if (not state) or state == 'done' or state == 'abandoned' then
  return 0
end
redis.call('HSET', KEYS[1], 'state', ARGV[1])
return 1

-- Create a session record unless it exists (a session re-learned twice) or the tenant
-- is at its ceiling of live sessions.
-- KEYS[1] session hash, KEYS[2] tenant's session set
-- ARGV[1] max live sessions (0: no ceiling), ARGV[2] session id, ARGV[3..] field, value pairs
-- Returns 1 created, 0 at the ceiling, -1 there already.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return -1
end
local max = tonumber(ARGV[1])
if max > 0 and redis.call('SCARD', KEYS[2]) >= max then
  return 0
end
for i = 3, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('SADD', KEYS[2], ARGV[2])
return 1

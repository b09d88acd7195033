-- Create a session record unless it exists (a session re-learned twice), the tenant
-- is at its ceiling of live sessions, or its sandbox type is no longer in the catalog.
-- KEYS[1] session hash, KEYS[2] tenant's session set, KEYS[3] the catalog of types,
-- KEYS[4] the catalog's version
-- ARGV[1] max live sessions (0: no ceiling), ARGV[2] session id, ARGV[3] the type ("":
-- not checked: a session re-learned from its record), ARGV[4..] field, value pairs
-- Returns 1 created, 0 at the ceiling, -1 there already, -2 the type was removed.
-- The type is checked here, atomically with the insert, because a removal deletes
-- the type first and then counts its sessions (scheduler/registry/types.py): either
-- that count sees this session, or this script sees the type gone. A Redis that lost
-- the catalog (no version) leaves the check to the API's view until it re-learns.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return -1
end
local max = tonumber(ARGV[1])
if max > 0 and redis.call('SCARD', KEYS[2]) >= max then
  return 0
end
if ARGV[3] ~= '' and redis.call('EXISTS', KEYS[4]) == 1
    and redis.call('HEXISTS', KEYS[3], ARGV[3]) == 0 then
  return -2
end
for i = 4, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('SADD', KEYS[2], ARGV[2])
return 1

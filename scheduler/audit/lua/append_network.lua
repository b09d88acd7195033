-- Append a session's collected egress attempts to its tenant's audit trail, once.
-- The cursor is compared and moved with the appends, so two API processes that
-- collect the same attempts at once append them once (the other gets -1 and reads again).
-- The cursor outlives the egress stream it follows (by a day at least), so an attempt
-- still in the stream is never collected again.
-- KEYS[1] the session's collection cursor (hash), KEYS[2] the tenant's audit stream,
-- KEYS[3] the session's egress stream
-- ARGV[1] the cursor read ('' none), ARGV[2] the new cursor, ARGV[3] the tenant,
-- ARGV[4] the cursor's least TTL (s), ARGV[5] the attempts consumed (appended or unreadable),
-- ARGV[6..] the records (JSON, field 'r')
if (redis.call('HGET', KEYS[1], 'id') or '') ~= ARGV[1] then
  return -1
end
for i = 6, #ARGV do
  redis.call('XADD', KEYS[2], '*', 'r', ARGV[i])
end
redis.call('HSET', KEYS[1], 'id', ARGV[2], 'tenant', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'n', ARGV[5])
local ttl = tonumber(ARGV[4])
local left = redis.call('TTL', KEYS[3])
if left + 86400 > ttl then
  ttl = left + 86400
end
redis.call('EXPIRE', KEYS[1], ttl)
return #ARGV - 5

-- Extend the leases that a node still holds; report which (1-based indexes into KEYS).
-- KEYS lease keys; ARGV[1] node, ARGV[2] ttl in ms
local kept = {}
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('PEXPIRE', key, ARGV[2])
    kept[#kept + 1] = i
  end
end
return kept

-- The API takes back a resent attempt that its worker refused without running it
-- (issue 22.5): the session's lease was held by the process the API had taken for
-- lost, which beats again and runs (or ran) the earlier attempt. The refuser's
-- claim is undone (its run is not counted) and the record names that process
-- again, so the API watches it. The attempt and the state stay (running), so a
-- late redelivery of either message is still refused by claim_turn.
-- KEYS[1] turn record
-- ARGV[1] the resent attempt, ARGV[2] the node that refused it,
-- ARGV[3] the earlier holder's node, ARGV[4] its incarnation
-- Returns 1 taken back; 0 when the record is no longer that refusal's claim, or
-- when no earlier attempt was ever claimed (nothing runs the turn: the refusal stands).
local seen = redis.call('HMGET', KEYS[1], 'state', 'attempt', 'node', 'runs')
if seen[1] ~= 'running' or seen[2] ~= ARGV[1] or seen[3] ~= ARGV[2] then
  return 0
end
local runs = (tonumber(seen[4]) or 0) - 1
if runs < 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'node', ARGV[3], 'inc', ARGV[4], 'runs', runs)
return 1

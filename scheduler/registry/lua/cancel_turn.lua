-- Mark a turn cancelled: on its record, which the worker's claim reads anyway
-- (sandgrid/wire/lua/claim_turn.lua: issue 22.1, no flag read of its own before a warm
-- exec), and in its flag, which a worker reads after a restore (the cancel task may
-- have gone to no node then) and a worker of the version before reads always.
-- A turn not admitted yet (a streamed exec names its turn before) gets a record of
-- the mark alone, with the flag's TTL; its admission keeps the mark and sets its own.
-- KEYS[1] turn record, KEYS[2] the turn's cancel flag
-- ARGV[1] the flag's TTL (s)
redis.call('SET', KEYS[2], '1', 'EX', ARGV[1])
if redis.call('HSET', KEYS[1], 'cancel', '1') == 1 and redis.call('TTL', KEYS[1]) < 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
end
return 1

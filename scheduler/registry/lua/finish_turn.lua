-- End a turn that answered, in one round trip: end_turn (mark its record done, give
-- back its session slot, release the session's alone lock if this op holds it), give
-- back the tenant's slot, drop the Celery result the API has read, and keep a keyed
-- exec's outcome under its idempotency key (one SET of its record: issue 22.1).
-- KEYS[1] the session's alone lock, KEYS[2] turn record, KEYS[3] tenant's in-flight set,
-- KEYS[4] the turn's Celery result, KEYS[5] the idempotency key,
-- KEYS[6] the session's turns in flight
-- ARGV[1] turn id, ARGV[2] '1': delete KEYS[4], ARGV[3] the key's record, its outcome
-- kept ('' for none: scheduler.turns.idempotency.done_record),
-- ARGV[4] how long the outcome is kept (s), ARGV[5] '1': the op held the session alone
-- (only then is the alone lock read: issue 22.1)
-- The record is marked done without a read first (issue 22.1): a live record always has
-- its 'state', so an HSET that adds the field found the record gone (lapsed, or lost in
-- a failover) and the field is taken away again: a gone record is never recreated
-- without a TTL. An abandoned record becomes done (its runner raises after abandoning
-- it, but a later end may still come: a keyed retry that finds the turn's result ends
-- it too), and every reader takes both alike: a final state, which a claim, a cancel
-- and an abandon all refuse.
if redis.call('HSET', KEYS[2], 'state', 'done') == 1 then
  redis.call('HDEL', KEYS[2], 'state')
end
if ARGV[5] == '1' and redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[6], ARGV[1])
if ARGV[2] == '1' then
  redis.call('DEL', KEYS[4])
end
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[5], ARGV[3], 'EX', ARGV[4])
end
return 1

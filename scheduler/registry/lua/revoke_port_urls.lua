-- Revoke a session's preview URLs (docs/ports.md): raise its revocation epoch of every
-- port ('*') or of one port, in the record's port_url_epochs (a JSON object, as every
-- field of the record). Raising '*' drops the ports' own epochs: every URL signed
-- before is revoked by '*' alone, and a URL signed after carries 0 for its port.
-- KEYS[1] session hash; ARGV[1] '*' or the port number, ARGV[2] the most ports with
-- an epoch of their own.
-- Returns the new epochs as JSON, '' when the session is gone or closed, 'full' when
-- ARGV[1] would be one port more than ARGV[2].
local state = redis.call('HGET', KEYS[1], 'state')
if not state or state == '"closed"' then
  return ''
end
local raw = redis.call('HGET', KEYS[1], 'port_url_epochs')
local epochs = {}
if raw then
  epochs = cjson.decode(raw)
end
local key = ARGV[1]
if key == '*' then
  epochs = {['*'] = (epochs['*'] or 0) + 1}
else
  if not epochs[key] then
    local ports = 0
    for k, _ in pairs(epochs) do
      if k ~= '*' then
        ports = ports + 1
      end
    end
    if ports >= tonumber(ARGV[2]) then
      return 'full'
    end
  end
  epochs[key] = (epochs[key] or 0) + 1
end
local out = cjson.encode(epochs)
redis.call('HSET', KEYS[1], 'port_url_epochs', out)
return out

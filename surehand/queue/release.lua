-- Compare-and-delete a session lease (Redis 7, Lua 5.1).
-- KEYS[1] = lease key, ARGV[1] = attempt id.
-- Deletes the key only while it is held by this attempt, so a late release from an old owner
-- never removes the lease of its successor.
-- Returns 1 when released, 0 when the key is missing or held by another attempt.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0

-- Every counter of one request, checked and counted in one atomic call, so replicas share one limit exactly.
--
-- KEYS[i]: one counter per charge. ARGV: mode ("acquire" or "adjust"), then four values per charge: limit,
-- amount, window_ms, and resets_in_ms (acquire) or stamp_ms, when the request was counted (adjust; the charges of
-- one adjust call may come from many requests).
-- A charge with window_ms > 0 is a sliding window kept as a hash of SLOTS + 1 slots (slot index -> amount); the
-- window counts every slot that overlaps the last window_ms, so it never admits more than a true sliding window.
-- A charge with window_ms = 0 is a calendar budget: a plain counter whose key names the period; it resets
-- (expires) resets_in_ms from now.
-- acquire: all or nothing; returns {allowed, retry_after_ms, now_ms, first_denied_index (0: none), remaining...}.
-- adjust: adds each amount (may be negative) where the request was counted; returns {}.

local SLOTS = 60
local DAY_MS = 86400000
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

local function charge(i)
  local base = 1 + (i - 1) * 4
  return tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4])
end

local function slot_size(window)
  return math.max(math.floor(window / SLOTS), 1)
end

-- The amount counted in the window, its live slots oldest first, and the current slot; drops expired slots.
local function window_state(key, window)
  local size = slot_size(window)
  local current = math.floor(now / size)
  local oldest = current - SLOTS
  local fields = redis.call('HGETALL', key)
  local used, live, stale = 0, {}, {}
  for j = 1, #fields, 2 do
    local slot, amount = tonumber(fields[j]), tonumber(fields[j + 1])
    if slot < oldest then
      stale[#stale + 1] = fields[j]
    else
      used = used + amount
      live[#live + 1] = {slot, amount}
    end
  end
  if #stale > 0 then
    redis.call('HDEL', key, unpack(stale))
  end
  table.sort(live, function(a, b) return a[1] < b[1] end)
  return used, live, size, current
end

-- Milliseconds until enough of the oldest slots leave the window to free `need`.
local function wait_for(live, size, need, window)
  local freed = 0
  for _, entry in ipairs(live) do
    freed = freed + entry[2]
    if freed >= need then
      return (entry[1] + SLOTS + 1) * size - now
    end
  end
  return window
end

if ARGV[1] == 'adjust' then
  for i = 1, #KEYS do
    local _, amount, window, stamp = charge(i)
    if redis.call('EXISTS', KEYS[i]) == 1 then
      if window > 0 then
        local size = slot_size(window)
        local slot = math.floor(stamp / size)
        if slot >= math.floor(now / size) - SLOTS then
          redis.call('HINCRBY', KEYS[i], slot, amount)
        end
      else
        redis.call('INCRBY', KEYS[i], amount)
      end
    end
  end
  return {}
end

local allowed, retry, denied = 1, 0, 0
local remaining, slots = {}, {}
for i = 1, #KEYS do
  local limit, amount, window, resets = charge(i)
  local used, refused = 0, false
  if window > 0 then
    local live, size, current
    used, live, size, current = window_state(KEYS[i], window)
    slots[i] = current
    local need = used + math.min(amount, limit) - limit
    if need > 0 then
      refused = true
      retry = math.max(retry, wait_for(live, size, need, window))
    end
  else
    used = tonumber(redis.call('GET', KEYS[i]) or '0')
    if used + amount > limit then
      refused = true
      retry = math.max(retry, resets)
    end
  end
  if refused and denied == 0 then
    allowed, denied = 0, i
  end
  remaining[i] = limit - used
end

if allowed == 1 then
  for i = 1, #KEYS do
    local _, amount, window, resets = charge(i)
    if window > 0 then
      redis.call('HINCRBY', KEYS[i], slots[i], amount)
      redis.call('PEXPIRE', KEYS[i], window + 2 * slot_size(window))
    else
      redis.call('INCRBY', KEYS[i], amount)
      redis.call('PEXPIRE', KEYS[i], resets + DAY_MS)
    end
    remaining[i] = remaining[i] - amount
  end
end
return {allowed, retry, now, denied, unpack(remaining)}

import { LEASE_SHARE, UNITS_PER_TOKEN } from './bucket.ts';

/**
 * The refill of `bucket.ts`, as one Lua script, so that read-refill-take-write is atomic and
 * every gateway sharing this Redis sees one bucket per key. The clock is Redis `TIME`, so
 * gateways with skewed clocks still agree. ARGV[1] (an explicit time in µs, or '') exists only
 * so the test suite can hold the script to the reference model; the store always passes ''.
 *
 * One call decides a whole batch: KEYS[i] with ARGV[4i-2] (per minute), ARGV[4i-1] (burst),
 * ARGV[4i] (how many requests take a token from it, one after the other) and ARGV[4i+1] (how
 * many more tokens the gateway would like to lease, see below). The script answers, per key,
 * the units the bucket held after refilling at `now`, before those requests; it takes as many
 * tokens as there are (at most the count), then the lease `leaseOf` (bucket.ts) allows, and
 * writes what is left. The store replays the same takes with `take` and `leaseOf` to give each
 * request its own decision: identical to one call per request at the same `now`, but Redis runs
 * one read and one write per key, not per request, and answers one integer per key. A negative
 * count gives leased tokens back (capped at the capacity). A key may appear more than once (a
 * policy change, a give-back): entries run in order. The store has one call in flight at a time
 * and sends every request that arrived meanwhile as the next (see `createRedisRateLimitStore`):
 * a busy gateway pays one round trip per Redis answer, not per request. (All keys of one call
 * must live on one Redis node; this store targets a single primary.)
 *
 * Why not rate-limiter-flexible (installed): its RateLimiterRedis is a fixed-window counter
 * (INCRBY + EXPIRE per `duration`), and BurstyRateLimiter stacks two such windows. Neither is a
 * token bucket with fractional refill: a fixed window lets 2× the limit through across a window
 * edge and refills in steps, not at perMinute/60 tokens per second.
 *
 * State is a hash {u: units, t: µs}; numbers are written with %.0f because Lua's tostring keeps
 * only 14 significant digits. An absent key is a full bucket, so the key expires once full.
 * Every quantity is an integer below 2^53 (policy.ts MAX_OVERRIDE), so Lua's doubles are exact;
 * the whole-token count is corrected after the division, which alone could round up.
 */
export const TOKEN_BUCKET_LUA = `
local U = ${UNITS_PER_TOKEN}
local SHARE = ${LEASE_SHARE}
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local out = {}
for i = 1, #KEYS do
  local per_minute = tonumber(ARGV[4 * i - 2])
  local capacity = tonumber(ARGV[4 * i - 1]) * U
  local count = tonumber(ARGV[4 * i])
  local lease = tonumber(ARGV[4 * i + 1])
  local units = capacity
  local at = now
  local held = redis.call('HMGET', KEYS[i], 'u', 't')
  if held[1] and held[2] then
    local held_at = tonumber(held[2])
    units = math.min(tonumber(held[1]), capacity)
    at = math.max(held_at, now)
    local elapsed = math.max(0, now - held_at)
    if elapsed * per_minute >= capacity - units then
      units = capacity
    else
      units = units + elapsed * per_minute
    end
  end
  local left = units
  if count < 0 then
    left = math.min(capacity, units - count * U)
  else
    local tokens = math.floor(units / U)
    if tokens * U > units then tokens = tokens - 1 end
    local taken = math.min(count, tokens)
    if lease > 0 then taken = taken + math.min(lease, math.floor((tokens - taken) / SHARE)) end
    left = units - taken * U
  end
  if left ~= units then
    redis.call('HSET', KEYS[i], 'u', string.format('%.0f', left), 't', string.format('%.0f', at))
    redis.call('PEXPIRE', KEYS[i], math.ceil(math.ceil((capacity - left) / per_minute) / 1000) + 1000)
  end
  out[i] = units
end
return out
`;

-- Argo CD health check for jetstream-operator.io resources: Stream, Consumer, NatsConnection,
-- KeyValue, ObjectStore, ClusterNatsConnection, NatsAccount, NatsUser.
--
-- The operator writes kstatus-style conditions (Ready, Reconciling, Stalled), each with the
-- generation it was computed for, and status.observedGeneration. Mapping:
--   no status yet, or metadata.generation newer than what the status describes -> Progressing
--   Ready with reason Paused (a person paused it; True where it was as declared)    -> Suspended
--   Stalled=True with reason Paused or ReadOnly (the operator was told not to act) -> Suspended
--   Stalled=True (needs a person: conflict, invalid spec, server rejection)        -> Degraded
--   Ready=True                                                                     -> Healthy
--   Reconciling=True (working on it, retrying by itself)                           -> Progressing
--   Ready=False otherwise                                                          -> Degraded
-- Plain Lua 5.1, as Argo CD's gopher-lua runs it, with only its base, table and os libraries:
-- no `string`, `math` or `io` (string.format fails there with "attempt to index a non-table").

local hs = {}

local function condition(conditions, kind)
  if conditions == nil then
    return nil
  end
  for _, c in ipairs(conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function message(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    if c.reason ~= nil and c.reason ~= "" then
      return c.reason .. ": " .. c.message
    end
    return c.message
  end
  return fallback
end

local generation = nil
if obj.metadata ~= nil then
  generation = obj.metadata.generation
end

if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report status"
  return hs
end

local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to act on generation " .. tostring(generation)
  return hs
end

local conditions = obj.status.conditions
local ready = condition(conditions, "Ready")
local reconciling = condition(conditions, "Reconciling")
local stalled = condition(conditions, "Stalled")

-- A condition computed for an older generation says nothing about the current spec.
local function current(c)
  if c == nil then
    return false
  end
  if generation ~= nil and c.observedGeneration ~= nil and c.observedGeneration < generation then
    return false
  end
  return true
end

if ready == nil or not current(ready) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report readiness of the current spec"
  return hs
end

if ready.reason == "Paused" then
  hs.status = "Suspended"
  hs.message = message(ready, "Paused")
  return hs
end

if current(stalled) and stalled.status == "True" then
  if stalled.reason == "Paused" or stalled.reason == "ReadOnly" then
    hs.status = "Suspended"
  else
    hs.status = "Degraded"
  end
  hs.message = message(stalled, "Stalled")
  return hs
end

if ready.status == "True" then
  hs.status = "Healthy"
  hs.message = message(ready, "Ready")
  return hs
end

if current(reconciling) and reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = message(reconciling, "Reconciling")
  return hs
end

hs.status = "Degraded"
hs.message = message(ready, "Not ready")
return hs

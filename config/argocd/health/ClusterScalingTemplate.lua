-- Argo CD health check for moonin.io/v1alpha1 ClusterScalingTemplate (Lua 5.1).
-- Same rules as ScalingTemplate.lua: both kinds share one status type.
-- Maintained in config/argocd/health/; e2e/argocd-health tests it and keeps the copy in
-- config/argocd/argocd-cm.yaml identical.
--
-- Reads what the scaling controller writes (src/scaling/decide.rs):
--   status absent, or observedGeneration behind metadata.generation -> Progressing
--   Stalled=True (phase Invalid: InvalidSchedule, UnknownTimeZone, InvalidDuration,
--     CrossNamespaceTarget)                                         -> Degraded
--   Ready=False because an action failed (TargetNotFound, Conflict, Blocked,
--     ReapplyLimitReached, ApplyFailed)                             -> Degraded
--   spec.suspend: true, once observed                               -> Suspended
--   Ready not True for any other reason                             -> Progressing
--   Reconciling=True (WaitingForRestore: a target still carries another
--     template's override)                                          -> Progressing
--   Ready=True (phase Active, Idle or Expired)                      -> Healthy

local function condition(status, kind)
  if type(status) ~= "table" or type(status.conditions) ~= "table" then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if type(c) == "table" and c.type == kind then
      return c
    end
  end
  return nil
end

local function text(c)
  if c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return c.reason or ""
end

-- Why the status does not describe the current spec yet, or nil when it does.
local function unobserved(o)
  local st = o.status
  if type(st) ~= "table" then
    return "waiting for the Moonin controller to report status"
  end
  local generation = o.metadata and o.metadata.generation
  local seen = st.observedGeneration
  if seen == nil then
    local ready = condition(st, "Ready")
    seen = ready and ready.observedGeneration
  end
  if generation ~= nil and seen ~= nil and seen < generation then
    return "waiting for the controller to observe generation " .. tostring(generation) ..
      " (status describes generation " .. tostring(seen) .. ")"
  end
  return nil
end

-- Ready=False reasons that need a change of the template or of its targets.
local broken = {
  InvalidSpec = true,
  InvalidSchedule = true,
  UnknownTimeZone = true,
  InvalidDuration = true,
  CrossNamespaceTarget = true,
  TargetNotFound = true,
  Conflict = true,
  Blocked = true,
  ReapplyLimitReached = true,
  ApplyFailed = true,
}

local waiting = unobserved(obj)
if waiting ~= nil then
  return { status = "Progressing", message = waiting }
end
local stalled = condition(obj.status, "Stalled")
if stalled ~= nil and stalled.status == "True" then
  return { status = "Degraded", message = text(stalled) }
end
local ready = condition(obj.status, "Ready")
if ready == nil then
  return { status = "Progressing", message = "waiting for the Ready condition" }
end
if ready.status == "False" and broken[ready.reason] then
  return { status = "Degraded", message = text(ready) }
end
if obj.spec ~= nil and obj.spec.suspend == true then
  return { status = "Suspended", message = text(ready) }
end
if ready.status ~= "True" then
  return { status = "Progressing", message = text(ready) }
end
local reconciling = condition(obj.status, "Reconciling")
if reconciling ~= nil and reconciling.status == "True" then
  return { status = "Progressing", message = text(reconciling) }
end
return { status = "Healthy", message = text(ready) }

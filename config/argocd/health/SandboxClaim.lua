-- Argo CD health check for moonin.io/v1alpha1 SandboxClaim (Lua 5.1).
-- Maintained in config/argocd/health/; e2e/argocd-health tests it and keeps the copy in
-- config/argocd/argocd-cm.yaml identical.
--
-- Reads what the sandbox controller writes (src/sandbox/controller.rs). A Pending claim
-- whose pool exists gets no status until it binds: it is simply queued.
--   no status.phase yet (queued)                                    -> Progressing
--   observedGeneration behind metadata.generation                   -> Progressing
--   phase Failed (PodLost: the bound Pod was deleted)               -> Degraded
--   Stalled=True, or Ready=False/PoolNotFound, EnvNotFound,
--     InvalidSpec (nothing to claim from)                           -> Degraded
--   phase Bound with Ready=True                                     -> Healthy
--   phase Released (the lifetime ended; the claim did its job)      -> Healthy
--   anything else (Pending, a phase from a newer Moonin)            -> Progressing

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

-- Ready=False reasons that leave the claim nothing to bind from.
local broken = {
  InvalidSpec = true,
  PoolNotFound = true,
  EnvNotFound = true,
}

local st = obj.status
if type(st) ~= "table" or st.phase == nil then
  return { status = "Progressing", message = "waiting for a sandbox Pod" }
end
local waiting = unobserved(obj)
if waiting ~= nil then
  return { status = "Progressing", message = waiting }
end
local ready = condition(st, "Ready")
if st.phase == "Failed" then
  local why = "the claim failed"
  if ready ~= nil then
    why = text(ready)
  end
  return { status = "Degraded", message = why }
end
local stalled = condition(st, "Stalled")
if stalled ~= nil and stalled.status == "True" then
  return { status = "Degraded", message = text(stalled) }
end
if ready ~= nil and ready.status == "False" and broken[ready.reason] then
  return { status = "Degraded", message = text(ready) }
end
if st.phase == "Bound" and ready ~= nil and ready.status == "True" then
  return { status = "Healthy", message = text(ready) }
end
if st.phase == "Released" then
  local why = "released"
  if ready ~= nil then
    why = text(ready)
  end
  return { status = "Healthy", message = why }
end
local why = "phase " .. tostring(st.phase) .. ": waiting for a sandbox Pod"
if ready ~= nil then
  why = text(ready)
end
return { status = "Progressing", message = why }

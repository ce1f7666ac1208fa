-- Argo CD health check for moonin.io/v1alpha1 WorkloadRevision (Lua 5.1).
-- Maintained in config/argocd/health/; e2e/argocd-health tests it and keeps the copy in
-- config/argocd/argocd-cm.yaml identical.
--
-- Written ahead of the discovery controller, which does not exist yet: it follows the CRD's
-- status schema (Ready once the record is complete) and DESIGN.md section 2.3. A revision
-- records a change; whether the change was good is the workload's own health. Revisit the
-- reasons when the controller lands.
--   status absent, or observedGeneration behind metadata.generation -> Progressing
--   Stalled=True, or Ready=False/InvalidSpec                        -> Degraded
--   Ready missing or not True (the record is being completed)       -> Progressing
--   Ready=True                                                      -> Healthy

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
if ready.status == "False" and ready.reason == "InvalidSpec" then
  return { status = "Degraded", message = text(ready) }
end
if ready.status ~= "True" then
  return { status = "Progressing", message = text(ready) }
end
return { status = "Healthy", message = text(ready) }

-- Argo CD health check for moonin.io/v1alpha1 SandboxPool (Lua 5.1).
-- Maintained in config/argocd/health/; e2e/argocd-health tests it and keeps the copy in
-- config/argocd/argocd-cm.yaml identical.
--
-- Reads what the sandbox controller and its autoscaler write (src/sandbox/controller.rs,
-- src/sandbox/autoscaler/decide.rs):
--   status absent, or observedGeneration behind metadata.generation -> Progressing
--   Stalled=True                                                    -> Degraded
--   Ready=False/PodCreateFailed (the API server refuses Pods built
--     from spec.template)                                           -> Degraded
--   Saturated=True (PartialScaleUp, ScaleUpRejected: the namespace's
--     quota refused the Pods a scale-up needs)                      -> Degraded
--   Ready not True (PodsStarting)                                   -> Progressing
--   Progressing=True (Pods starting, or more Pods than spec.replicas
--     while a scale-down finishes)                                  -> Progressing
--   Ready=True (PoolReady); ScalingLimited=True is a configured bound -> Healthy

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

-- Ready=False reasons that need a change of the pool's template or of the namespace.
local broken = {
  InvalidSpec = true,
  PodCreateFailed = true,
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
local saturated = condition(obj.status, "Saturated")
if saturated ~= nil and saturated.status == "True" then
  return { status = "Degraded", message = text(saturated) }
end
if ready.status ~= "True" then
  return { status = "Progressing", message = text(ready) }
end
local progressing = condition(obj.status, "Progressing")
if progressing ~= nil and progressing.status == "True" then
  -- "N sandbox Pods starting" says nothing while extra Pods wait to go: then Ready's
  -- counts ("4 of 3 sandbox Pods ready, ...") tell the story.
  local why = ready
  if progressing.reason == "PodsStarting" then
    why = progressing
  end
  return { status = "Progressing", message = text(why) }
end
return { status = "Healthy", message = text(ready) }

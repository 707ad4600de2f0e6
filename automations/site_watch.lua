-- site_watch: checks the monitored URLs every 30 seconds (webcheck skill).
-- Deterministic checks decide what is up or down; only a *change* that needs
-- judgment (something went down) is handed to the model through delegate().
-- Without a model configured, delegate() raises err.code == "no_provider":
-- the run logs it, writes the outage into a note anyway, and still succeeds.
--
-- Targets live in data/webcheck/targets.json (add them with the webcheck
-- skill's add_target tool); with none configured the local service
-- http://127.0.0.1:8080/health is watched, so the demo shows the whole path.

local DEFAULT = { { url = "http://127.0.0.1:8080/health", timeout_s = 2 } }

local function call(name, args)
  if not tools.exists(name) then return nil, name .. " is not available (skill not loaded)" end
  local ok, res = pcall(tools.call, name, args)
  if ok then return res end
  return nil, type(res) == "table" and (res.message or res.code) or tostring(res)
end

local function ask_model(prompt)
  -- delegate may be absent in a build without the model loop; both cases degrade.
  local ok, res = pcall(function()
    return delegate(prompt, {
      schema = { type = "object", required = { "alert", "summary" },
                 properties = { alert = { type = "boolean" }, summary = { type = "string" } } },
      max_iterations = 3,
    })
  end)
  if ok then return res end
  local code = type(res) == "table" and res.code or "unavailable"
  local msg = type(res) == "table" and (res.message or res.code) or tostring(res)
  return nil, code, msg
end

return {
  name = "site_watch",
  description = "Check the monitored URLs; ask the model whether a new outage needs an alert",
  every = "30s",
  timeout = "60s",
  run = function(ctx)
    local listed = call("webcheck.targets", {})
    local targets = listed and #listed.targets > 0 and listed.targets or DEFAULT
    local was = ctx.state.status or {}
    local now_status, newly_down, results = {}, {}, {}
    for _, t in ipairs(targets) do
      local r, why = call("webcheck.check", t)
      r = r or { url = t.url, ok = false, reason = why }
      now_status[t.url] = r.ok and "up" or "down"
      results[#results + 1] = r
      if not r.ok and was[t.url] ~= "down" then newly_down[#newly_down + 1] = r end
      if r.ok and was[t.url] == "down" then log.info("recovered: " .. t.url) end
    end
    ctx.state.status = now_status
    ctx.state.checks = (ctx.state.checks or 0) + 1

    if #newly_down == 0 then
      local down = 0
      for _, s in pairs(now_status) do if s == "down" then down = down + 1 end end
      return { checked = #results, down = down }
    end

    -- Something changed for the worse: this is the judgment call.
    local lines = {}
    for _, r in ipairs(newly_down) do lines[#lines + 1] = r.url .. ": " .. tostring(r.reason) end
    local report = table.concat(lines, "\n")
    local verdict, code, msg = ask_model(
      "These monitored endpoints just went down:\n" .. report ..
      "\nIs this worth alerting the operator about, and what is a one-line summary?")
    local outcome
    if verdict then
      outcome = verdict.alert and ("alert: " .. verdict.summary) or ("no alert: " .. verdict.summary)
    else
      log.warn("no model verdict (" .. code .. "): " .. tostring(msg) .. "; recorded without triage")
      outcome = "untriaged (" .. code .. ")"
    end
    call("notes.add", { title = "outages", text = report:gsub("\n", "; ") .. " -> " .. outcome })
    return { checked = #results, newly_down = #newly_down, triage = outcome }
  end,
}

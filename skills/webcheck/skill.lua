-- webcheck: HTTP checks of configured URLs through http.request (which only
-- reaches hosts on the workspace's http_allow list). Targets are kept in
-- data/webcheck/targets.json so they survive between runs.

local FILE = "webcheck/targets.json"

local function load_targets()
  local ok, r = pcall(tools.call, "fs.read", { path = FILE })
  if not ok then return {} end
  local t = json.decode(r.content)
  return type(t) == "table" and t or {}
end

local function save_targets(t)
  tools.call("fs.write", { path = FILE, content = json.encode(t) })
end

-- One check: status and optional text expectation, with the elapsed time.
local function check(target)
  local t0 = tools.call("time.now", {}).unix
  local ok, res = pcall(tools.call, "http.request",
    { url = target.url, method = "GET", timeout_s = target.timeout_s or 10, max_bytes = 1048576 })
  local ms = math.floor((tools.call("time.now", {}).unix - t0) * 1000 + 0.5)
  if not ok then
    return { url = target.url, ok = false, ms = ms,
             reason = type(res) == "table" and (res.message or res.code) or tostring(res) }
  end
  local want = target.expect_status or 200
  if res.status ~= want then
    return { url = target.url, ok = false, status = res.status, ms = ms,
             reason = "status " .. res.status .. ", expected " .. want }
  end
  if target.contains and not (res.body or ""):find(target.contains, 1, true) then
    return { url = target.url, ok = false, status = res.status, ms = ms,
             reason = "body does not contain " .. string.format("%q", target.contains) }
  end
  return { url = target.url, ok = true, status = res.status, ms = ms }
end

local target_props = {
  url = { type = "string", minLength = 1, maxLength = 2048 },
  expect_status = { type = "integer", minimum = 100, maximum = 599 },
  contains = { type = "string", maxLength = 200 },
  timeout_s = { type = "number", exclusiveMinimum = 0, maximum = 60 },
}

return {
  name = "webcheck",
  description = "Check that websites and HTTP endpoints are up: status code, expected text, response time; keep a list of URLs to monitor",
  keywords = { "website", "uptime", "health check", "endpoint", "is it up", "down", "http status", "monitor" },
  tags = { "http", "monitoring" },
  examples = {
    "is the status page up?",
    "check whether https://example.com returns 200",
    "monitor our API health endpoint",
    "run the website checks",
    "which of our sites are down?",
  },
  prompt = "Only hosts on the workspace's http_allow list can be checked; report failures with their reason.",
  tools = {
    check = {
      description = "Check one URL now: HTTP status (default expected 200), optional text the body must contain, elapsed ms",
      params = { type = "object", required = { "url" }, additionalProperties = false, properties = target_props },
      impact = "read",
      open_world = true,
      run = function(args) return check(args) end,
    },
    add_target = {
      description = "Add a URL to the list of monitored targets (replaces an entry with the same URL)",
      params = { type = "object", required = { "url" }, additionalProperties = false, properties = target_props },
      impact = "low",
      run = function(args)
        local targets = load_targets()
        local kept = {}
        for _, t in ipairs(targets) do
          if t.url ~= args.url then kept[#kept + 1] = t end
        end
        kept[#kept + 1] = args
        save_targets(kept)
        return { targets = #kept }
      end,
    },
    targets = {
      description = "List the monitored targets",
      params = { type = "object", properties = {} },
      impact = "read",
      run = function() return { targets = load_targets() } end,
    },
    check_all = {
      description = "Check every monitored target and summarise which are up and which are down",
      params = { type = "object", properties = {} },
      impact = "read",
      open_world = true,
      run = function()
        local results, down = {}, 0
        for _, t in ipairs(load_targets()) do
          local r = check(t)
          if not r.ok then down = down + 1 end
          results[#results + 1] = r
        end
        return { checked = #results, down = down, results = results }
      end,
    },
  },
}

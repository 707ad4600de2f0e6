-- morning_digest: on weekdays at 07:00 Paris time, writes a digest note that
-- lists the notes changed since the previous digest. Run it now with
--   luagent automations run morning_digest

return {
  name = "morning_digest",
  description = "Weekday 07:00 digest of the workspace notes",
  cron = "0 7 * * 1-5",
  tz = "Europe/Paris",
  catch_up = true,          -- if the daemon was down at 07:00, run once when it is back
  timeout = "20s",
  run = function(ctx)
    if not tools.exists("notes.list") then return "skipped: notes skill missing" end
    local names = tools.call("notes.list", {}).notes
    local seen = ctx.state.seen or {}
    local fresh = {}
    for _, n in ipairs(names) do
      if n ~= "digest.md" then
        local text = tools.call("notes.read", { title = n:gsub("%.md$", "") }).text
        local size = #text
        if seen[n] ~= size then fresh[#fresh + 1] = n .. " (" .. size .. " bytes)" end
        seen[n] = size
      end
    end
    ctx.state.seen = seen
    local body = #fresh == 0 and "no changes" or table.concat(fresh, ", ")
    tools.call("notes.add", { title = "digest", text = os.date("!%Y-%m-%d") .. ": " .. body })
    return { notes = #names, changed = #fresh }
  end,
}

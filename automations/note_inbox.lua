-- note_inbox: files notes sent as events, e.g.
--   luagent emit note '{"title": "ideas", "text": "try the cron trigger"}'
-- Any script can send one too: events.emit("note", { title = ..., text = ... }).

return {
  name = "note_inbox",
  description = "Append the text of each `note` event to the note with that title",
  on = "note",
  mode = "queued",
  max = 20,
  timeout = "10s",
  run = function(ctx)
    local p = ctx.trigger.payload
    if type(p) ~= "table" or type(p.text) ~= "string" or p.text == "" then
      error("a note event needs a payload like {\"title\": \"ideas\", \"text\": \"...\"}")
    end
    local title = type(p.title) == "string" and p.title ~= "" and p.title or "inbox"
    if not tools.exists("notes.add") then
      log.warn("the notes skill is not loaded; note dropped: " .. p.text)
      return "skipped: notes skill missing"
    end
    local r = tools.call("notes.add", { title = title, text = p.text })
    ctx.state.filed = (ctx.state.filed or 0) + 1
    return (r.created and "created " or "appended to ") .. r.path
  end,
}

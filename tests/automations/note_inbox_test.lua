-- Tests of automations/note_inbox.lua, an `on = "note"` automation: the
-- test hands it the event as its trigger.

local function note_event(payload)
  return { trigger = { kind = "event", name = "note", payload = payload } }
end

test("an event creates the note, the next one appends", function()
  local first = automation.run("note_inbox", note_event({ title = "ideas", text = "try cron" }))
  expect(first.result).to_be("created data/notes/ideas.md")
  local second = automation.run("note_inbox", note_event({ title = "ideas", text = "and events" }))
  expect(second.result).to_be("appended to data/notes/ideas.md")
  expect(second.state).to_equal({ filed = 2 })
  expect(tools.call("notes.read", { title = "ideas" }).text).to_contain("and events")
end)

test("a note without a title goes to the inbox", function()
  expect(automation.run("note_inbox", note_event({ text = "call back" })).result).to_contain("inbox.md")
end)

test("a malformed event fails the run, and the state stays as it was", function()
  local run = automation.run("note_inbox", note_event({ title = "x" }))
  expect(run.status).to_be("failed")
  expect(run.error).to_contain("needs a payload")
  expect(run.calls).to_equal({})
end)

test("an event sent with events.emit is delivered as the clock moves", function()
  events.emit("note", { title = "ideas", text = "from a script" })
  local runs = clock.advance(0) -- queued events are delivered first
  expect(#runs).to_be(1)
  expect(runs[1].name).to_be("note_inbox")
  expect(runs[1].trigger.payload).to_equal({ title = "ideas", text = "from a script" })
  expect(tools.call("notes.read", { title = "ideas" }).text).to_contain("from a script")
  expect(clock.advance(0)).to_equal({}) -- each event once
end)

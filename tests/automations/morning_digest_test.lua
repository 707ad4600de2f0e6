-- Tests of automations/morning_digest.lua: cron "0 7 * * 1-5" in
-- Europe/Paris, driven by the fake clock (os.date in the automation reads it too).

test("a weekday at 07:00 Paris time (06:00 UTC in winter) writes the digest", function()
  tools.call("notes.add", { title = "budget", text = "draft sent" })
  fake.clock("2026-12-01T05:00:00Z") -- a Tuesday
  local runs = clock.advance("2h", { only = "morning_digest" })
  expect(#runs).to_be(1)
  expect(os.date("!%H:%M", math.floor(runs[1].time))).to_be("06:00")
  expect(runs[1].result).to_equal({ notes = 1, changed = 1 })
  local digest = tools.call("notes.read", { title = "digest" }).text
  expect(digest).to_contain("2026-12-01: budget.md (")
end)

test("no digest at the weekend", function()
  fake.clock("2026-12-05T00:00:00Z") -- Saturday
  expect(clock.advance("2d", { only = "morning_digest" })).to_equal({})
  expect(#clock.advance("7h", { only = "morning_digest" })).to_be(1) -- Monday 06:00 UTC
end)

test("the next digest lists only what changed since the last one", function()
  tools.call("notes.add", { title = "a", text = "one" })
  tools.call("notes.add", { title = "b", text = "two" })
  fake.clock("2026-12-01T05:00:00Z")
  clock.advance("2h", { only = "morning_digest" })
  tools.call("notes.add", { title = "b", text = "more" })
  local runs = clock.advance("1d", { only = "morning_digest" })
  expect(runs[1].result).to_equal({ notes = 3, changed = 1 }) -- a, b, digest; only b changed
end)

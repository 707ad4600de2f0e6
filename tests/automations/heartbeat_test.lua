-- Tests of automations/heartbeat.lua: the fake clock fires its `every = "15s"`
-- trigger as time moves, and ctx.state carries from one run to the next.

test("every 15s: three beats in 45s, each knowing the gap since the last", function()
  fake.clock("2026-12-01T09:00:00Z")
  local runs = clock.advance("45s", { only = "heartbeat" })
  expect(#runs).to_be(3)
  expect(runs[1].result).to_be("beat 1 (first beat)")
  expect(runs[2].result).to_be("beat 2 (15.0s)")
  expect(runs[3].state).to_equal({ beats = 3 })
  expect(runs[3].time - runs[1].time).to_be(30)
  expect(runs[1].trigger.kind).to_be("every")
end)

test("nothing fires before the interval is up", function()
  fake.clock(1000)
  expect(clock.advance("14s", { only = "heartbeat" })).to_equal({})
  expect(#clock.advance("1s", { only = "heartbeat" })).to_be(1)
  expect(clock.now()).to_be(1015)
end)

test("a run started by hand continues from the state it is given", function()
  local run = automation.run("heartbeat", { state = { beats = 41 } })
  expect(run.status).to_be("ok")
  expect(run.result).to_match("^beat 42 ")
  expect(run.calls).to_equal({}) -- heartbeat calls no tools
end)

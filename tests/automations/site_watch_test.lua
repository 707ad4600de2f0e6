-- Tests of automations/site_watch.lua: fake.http plays the monitored
-- service, model.script plays the model that triages an outage.

local HEALTH = "http://127.0.0.1:8080/health"

test("all up: no model call, no note, the state records the status", function()
  fake.http { [HEALTH] = { status = 200, body = "ok" } }
  local run = automation.run("site_watch")
  expect(run.status).to_be("ok")
  expect(run.result).to_equal({ checked = 1, down = 0 })
  expect(run.state.status).to_equal({ [HEALTH] = "up" })
  expect(model.requests()).to_equal({}) -- never asks the model when the site is up
  expect(calls("notes.add")).to_equal({})
end)

test("newly down: the model decides, and the outage is written down", function()
  fake.http { [HEALTH] = { status = 503 } }
  model.script { { text = '{"alert": true, "summary": "health endpoint returns 503"}' } }
  local run = automation.run("site_watch", { state = { status = { [HEALTH] = "up" } } })
  expect(run.result.triage).to_be("alert: health endpoint returns 503")
  -- the prompt named the endpoint and the reason
  local prompt = model.requests()[1].messages[1].content
  expect(prompt).to_contain(HEALTH .. ": status 503, expected 200")
  local note = calls("notes.add")[1]
  expect(note.caller).to_equal({ kind = "automation", name = "site_watch" })
  expect(note.args.title).to_be("outages")
  expect(tools.call("notes.read", { title = "outages" }).text).to_contain("alert: health")
end)

test("still down on the next run: no second alert", function()
  fake.http { [HEALTH] = { status = 503 } }
  model.script { { text = '{"alert": true, "summary": "down"}' } }
  local first = automation.run("site_watch")
  expect(first.result.newly_down).to_be(1)
  local second = automation.run("site_watch") -- carries on from first.state
  expect(second.result).to_equal({ checked = 1, down = 1 })
  expect(#model.requests()).to_be(1)
end)

test("without a model configured, the outage is recorded untriaged", function()
  fake.http { [HEALTH] = { status = 500 } }
  local run = automation.run("site_watch")
  expect(run.status).to_be("ok")
  expect(run.result.triage).to_be("untriaged (no_provider)")
end)

test("every 30s on the clock, the targets from data/ are checked", function()
  tools.call("webcheck.add_target", { url = "http://127.0.0.1:8080/ready" })
  fake.http { ["http://127.0.0.1:8080/ready"] = { status = 200 } }
  fake.clock("2026-12-01T12:00:00Z")
  local runs = clock.advance("1m", { only = "site_watch" })
  expect(#runs).to_be(2)
  expect(runs[2].state.checks).to_be(2)
  expect(#calls("http.request")).to_be(2)
end)

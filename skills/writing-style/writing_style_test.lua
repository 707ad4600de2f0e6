-- Tests of the writing-style skill (a SKILL.md: instructions, no tools).
-- What matters is that a writing request selects it, so its rules reach
-- the model, and that other requests do not carry them along.

test("a writing request puts the house style into the system prompt", function()
  model.script { { text = "Release moved to Friday 2026-12-04." } }
  local r = ask("rewrite this announcement so it is clearer: the release is kinda delayed")
  expect(r.status).to_be("ok")
  local system = model.requests()[1].system
  expect(system).to_contain("Lead with the point.")
  expect(system).to_contain("never invent any")
end)

test("an unrelated request does not get the writing rules", function()
  model.script { { text = "ok" } }
  ask("list my notes")
  expect(model.requests()[1].system).never.to_contain("Lead with the point.")
end)

-- Tests of the notes skill, run by `luagent test` (see "Testing your skills"
-- in README.md). Each test starts with an empty data/ folder of its own.

describe("notes tools", function()
  test("add creates a note, a second add appends to it", function()
    local first = tools.call("notes.add", { title = "Deploy plan", text = "moved to Friday" })
    expect(first).to_equal({ path = "data/notes/deploy-plan.md", created = true })
    local again = tools.call("notes.add", { title = "deploy plan", text = "ask Sam" })
    expect(again.created).to_be(false)
    local text = tools.call("notes.read", { title = "Deploy plan" }).text
    expect(text).to_match("^# Deploy plan\n")
    expect(text).to_contain("moved to Friday")
    expect(text).to_contain("ask Sam")
  end)

  test("the note's timestamp comes from the clock", function()
    fake.clock("2026-12-01T07:30:00Z")
    tools.call("notes.add", { title = "standup", text = "short one" })
    expect(tools.call("notes.read", { title = "standup" }).text).to_contain("2026-12-01T07:30:00Z: short one")
  end)

  test("list and search", function()
    tools.call("notes.add", { title = "invoices", text = "send the March invoice" })
    tools.call("notes.add", { title = "printer", text = "the password is on the side" })
    expect(tools.call("notes.list", {})).to_equal({ notes = { "invoices.md", "printer.md" } })
    local found = tools.call("notes.search", { query = "march invoice" })
    expect(#found.matches).to_be(1)
    expect(found.matches[1].note).to_be("invoices.md")
  end)

  test("a title without a letter or digit is refused", function()
    expect(function() tools.call("notes.add", { title = "!!!", text = "x" }) end).to_raise("invalid_args")
  end)

  test("reading a note that does not exist raises", function()
    expect(function() tools.call("notes.read", { title = "nothing" }) end).to_raise()
  end)
end)

describe("deleting", function()
  before_each(function()
    tools.call("notes.add", { title = "old", text = "stale" })
  end)

  test("fs.delete has impact high: the delete waits for approval, and a denial keeps the note", function()
    fake.approver { ["fs.delete"] = "deny" }
    expect(function() tools.call("notes.delete", { title = "old" }) end).to_raise("denied")
    expect(tools.call("notes.list", {}).notes).to_equal({ "old.md" })
    local asked = approvals()
    expect(#asked).to_be(1)
    expect(asked[1].tool).to_be("fs.delete")
    expect(asked[1].args).to_equal({ path = "notes/old.md" })
    expect(asked[1].caller).to_equal({ kind = "skill", name = "notes" })
  end)

  test("approved, the note is gone", function()
    fake.approver { ["fs.delete"] = "approve" }
    expect(tools.call("notes.delete", { title = "old" })).to_equal({ deleted = "old" })
    expect(tools.call("notes.list", {}).notes).to_equal({})
  end)
end)

describe("with the model", function()
  test("asked as `luagent ask` would be, the notes skill is selected and used", function()
    model.script {
      { tool = "notes.add", args = { title = "groceries", text = "milk" } },
      { text = "Added: %{result}" },
    }
    local r = ask("write down that I need milk")
    expect(r.status).to_be("ok")
    expect(r.answer).to_contain("data/notes/groceries.md")
    -- the skill's prompt joined the system prompt, and its tools were offered
    local request = model.requests()[1]
    expect(request.system).to_contain("Notes are Markdown files")
    local offered = {}
    for _, t in ipairs(request.tools) do offered[t.name] = true end
    expect(offered["notes.search"]).to_be(true)
  end)

  test("the model writes a note through notes.add", function()
    model.script {
      { tool = "notes.add", args = { title = "deploy", text = "moved to Friday" } },
      { text = "Noted: %{result}" },
    }
    local answer = delegate("write down that the deploy moved to Friday", { tools = { "notes.*" } })
    expect(answer).to_contain("deploy.md")
    local c = calls("notes.add")
    expect(#c).to_be(1)
    expect(c[1].caller.kind).to_be("model")
    expect(c[1].decision).to_be("allow")
    -- what the model was offered: the notes tools, and no host tool such as fs.write
    local offered = {}
    for _, t in ipairs(model.requests()[1].tools) do
      if t.name:match("^notes%.") or t.name:match("^fs%.") then offered[#offered + 1] = t.name end
    end
    table.sort(offered)
    expect(offered).to_equal({ "notes.add", "notes.delete", "notes.list", "notes.read", "notes.search" })
  end)

  test("the model asks to delete: the approver sees it before anything is deleted", function()
    tools.call("notes.add", { title = "draft", text = "x" })
    model.script { { tool = "notes.delete", args = { title = "draft" } }, { text = "%{result}" } }
    fake.approver(function(req)
      -- the note is still there while the approval is pending
      expect(tools.call("notes.list", {}).notes).to_equal({ "draft.md" })
      return "deny"
    end)
    delegate("delete my draft note", { tools = { "notes.*" } })
    expect(#approvals("fs.delete")).to_be(1)
    expect(calls("fs.delete")[1].decision).to_be("deny")
    expect(tools.call("notes.list", {}).notes).to_equal({ "draft.md" })
  end)
end)

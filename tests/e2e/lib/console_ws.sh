# A workspace for the console tests (sourced): the scripted model, a skill
# whose tool needs approval, an automation. console_ws DIR writes it.
console_ws() {
  d=$1
  mkdir -p "$d/skills/board" "$d/automations"
  cat > "$d/luagent.lua" <<'LUA'
return {
  approver = "queue",
  approval_timeout_s = 120,
  providers = { { name = "demo", kind = "script", turns = {
    -- a steer becomes the latest user message: this answers it
    { match = "steered", turns = { { text = "Steered answer: %{user}" } } },
    { match = "publish", turns = {
      { text = "Publishing.", tool = "board.publish", args = { title = "hello" } },
      { text = "Done: %{result}" } } },
    { match = "markup", turns = { { text = "<img src=x onerror=\"window.__pwned=1\"><b>bold?</b>" } } },
    { match = "leak", turns = { { text = "the value is s3cr3t-VALUE-42, oops" } } },
    { turns = { { text = "Hello from the script." } } },
  } } },
}
LUA
  cat > "$d/skills/board/skill.lua" <<'LUA'
return {
  name = "board",
  description = "Publish a short notice on the team board",
  keywords = { "publish", "board", "notice" },
  tools = {
    publish = {
      description = "Publish a notice (needs approval)",
      params = { type = "object", required = { "title" }, additionalProperties = false,
                 properties = { title = { type = "string", maxLength = 20 } } },
      impact = "high",
      run = function(args) return { published = args.title } end,
    },
  },
}
LUA
  cat > "$d/automations/tick.lua" <<'LUA'
return { name = "tick", every = "1h", run = function(ctx) return "tick ran" end }
LUA
  cat > "$d/automations/nightly.lua" <<'LUA'
return { name = "nightly", cron = "0 3 * * *", tz = "Europe/Paris",
         run = function(ctx) return "nightly ran" end }
LUA
}

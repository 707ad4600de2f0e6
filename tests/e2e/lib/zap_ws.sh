# A workspace whose scripted model calls a high-impact tool that waits in
# the approval queue (sourced after common.sh): `ask zap` calls hi.zap,
# which appends its tag to data/zapped.txt once approved; `ask` anything
# else answers "hello". zap_ws writes it into $WS.
zap_ws() {
  mkdir -p "$WS/skills/hi" "$WS/data" "$WS/automations"
  cat > "$WS/luagent.lua" <<'LUA'
return {
  providers = { { name = "demo", kind = "script", turns = {
    { match = "zap", turns = { { tool = "hi.zap", args = { tag = "model" } }, { text = "done" } } },
    { turns = { { text = "hello" } } } } } },
  approver = "queue",
  approval_timeout_s = 60,
}
LUA
  cat > "$WS/skills/hi/skill.lua" <<'LUA'
return { name = "hi", description = "high impact tool", keywords = { "zap" },
  tools = { zap = { description = "records its tag", impact = "high",
    params = { type = "object", properties = { tag = { type = "string" } } },
    run = function(args)
      tools.call("fs.write", { path = "zapped.txt", content = args.tag .. "\n", append = true })
      return { tag = args.tag } end } } }
LUA
}

# Issue 18 item 15: delegate()'s max_iterations bounds its own call only.
# The script's budget is its `react` limits: six delegates of 3 iterations
# each, with max_iterations = 5, all succeed under react.max_iterations = 50,
# while a delegate whose option is smaller than its task still stops.
. "$(dirname "$0")/lib/mock.sh" "$1"
start_mock m '{"by_turn":true,"steps":[
  {"tool_calls":[{"id":"c1","name":"echo","arguments":{"msg":"one"}}]},
  {"tool_calls":[{"id":"c2","name":"echo","arguments":{"msg":"two"}}]},
  {"text":"done"}]}'
config "providers = { $(provider openai $PORT_m) }, react = { max_iterations = 50 }"
cat > "$WS/six.lua" <<'LUA'
local n = 0
for i = 1, 6 do
  local ok, r = pcall(delegate, "echo twice", { tools = { "echo" }, max_iterations = 5 })
  if ok then n = n + 1 else print("call " .. i .. ": " .. r.code .. " " .. r.message) end
end
print("succeeded " .. n)
local ok, r = pcall(delegate, "echo twice", { tools = { "echo" }, max_iterations = 2 })
print("small option: " .. (ok and "ok" or r.code))
LUA
lrun "$WS/six.lua"
expect_rc 0 "script ran"
expect_out "succeeded 6" "six delegates with max_iterations = 5 each succeed"
expect_out "small option: budget_exceeded" "an option smaller than the task still bounds its call"
# The script's own budget still holds: react.max_iterations = 4 in total.
config "providers = { $(provider openai $PORT_m) }, react = { max_iterations = 4 }"
lrun "$WS/six.lua"
expect_out "succeeded 1" "the script's react limits bound all its delegates together"
finish

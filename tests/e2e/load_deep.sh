# Issue 18 item 14: a file nested too deeply for Lua's parser gets an error
# that names the file and the line, for luagent.lua and for a script alike.
. "$(dirname "$0")/lib/common.sh"
python3 - "$WS" <<'PY'
import sys
ws = sys.argv[1]
open(ws + "/luagent.lua", "w").write("return {\n  limits = {},\n  x = " + "{" * 200000 + "}" * 200000 + "\n}\n")
open(ws + "/deep.lua", "w").write("print('a')\nlocal x = " + "(" * 300 + "1" + ")" * 300 + "\n")
PY
expect_rc 2 "$LUAGENT" tools list && err_has "luagent.lua:3: nested too deeply (C stack overflow)" && pass "luagent.lua: file and line"
printf 'return {}\n' > "$WS/luagent.lua"
expect_rc 1 "$LUAGENT" run deep.lua && err_has "deep.lua:2: nested too deeply (C stack overflow)" && pass "a script: file and line"
finish

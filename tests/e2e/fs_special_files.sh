#!/bin/bash
# e2e: fs.* never blocks on, and never reads or writes, a file in data/ that
# is not a regular file. A FIFO (named pipe) with no writer blocks open(2)
# for reading forever, and one with no reader blocks open(2) for writing;
# a socket or a device is no file either. Each call must come back at once
# with an error naming the path and what it is; the outer `timeout` makes a
# hang fail the test instead of stalling it.
. "$(dirname "$0")/lib/mock.sh" "$1"
mkfifo "$WS/data/pipe" || { echo "mkfifo failed"; exit 1; }
mkdir -p "$WS/data/sub"
mkfifo "$WS/data/sub/pipe2"
python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$WS/data/sock"
echo hello > "$WS/data/plain.txt"
cat > "$WS/t.lua" <<'LUA'
local function try(label, tool, args)
  local ok, r = pcall(tools.call, tool, args)
  if ok and tool == "fs.read" then print(label, "ok", r.size, r.content)
  elseif ok and tool == "fs.list" then
    for _, f in ipairs(r) do print(label, f.name, f.type) end
  elseif ok then print(label, "ok", r.size)
  else print(label, "error", r.code, r.message) end
end
try("read-fifo", "fs.read", { path = "pipe" })
try("read-fifo-sub", "fs.read", { path = "sub/pipe2" })
try("read-sock", "fs.read", { path = "sock" })
try("read-dir", "fs.read", { path = "sub" })
try("read-through-fifo", "fs.read", { path = "pipe/x" })
try("list-fifo", "fs.list", { path = "pipe" })
try("write-through-fifo", "fs.write", { path = "pipe/x", content = "x" })
try("write-fifo", "fs.write", { path = "pipe", content = "x" })
try("append-fifo", "fs.write", { path = "pipe", content = "x", append = true })
try("append-sock", "fs.write", { path = "sock", content = "x", append = true })
try("read-plain", "fs.read", { path = "plain.txt" })
try("append-plain", "fs.write", { path = "plain.txt", content = "more\n", append = true })
try("list", "fs.list", {})
LUA
start=$(date +%s)
timeout 20 "$LUAGENT" --workspace "$WS" run "$WS/t.lua" > "$WS/out" 2> "$WS/err"
RC=$?
OUT=$(cat "$WS/out"); ERR=$(cat "$WS/err")
took=$(( $(date +%s) - start ))
[ "$RC" = 124 ] && fail "fs.* hung on a special file (killed by the test's timeout)"
expect_rc 0 "the script finishes"
[ "$took" -lt 10 ] && ok "it finishes promptly (${took}s)" || fail "it took ${took}s"
expect_out "read-fifo	error	invalid_path	fs.read: pipe: is a FIFO (named pipe), not a regular file" "fs.read refuses a FIFO"
expect_out "read-fifo-sub	error	invalid_path	fs.read: sub/pipe2: is a FIFO (named pipe), not a regular file" "fs.read refuses a FIFO in a subfolder"
expect_out "read-sock	error	invalid_path	fs.read: sock: is a socket, not a regular file" "fs.read refuses a socket"
expect_out "read-dir	error	invalid_path	fs.read: sub: is a directory, not a regular file" "fs.read refuses a directory"
expect_out "read-through-fifo	error	invalid_path	fs.read: pipe/x: leaves the data folder or is not a directory" "a FIFO as a folder is refused"
expect_out "list-fifo	error	invalid_path	fs.list: pipe/: leaves the data folder or is not a directory" "fs.list of a FIFO is refused"
expect_out "write-through-fifo	error" "fs.write through a FIFO as a folder is refused"
expect_out "write-fifo	error	invalid_path	fs.write: pipe: is a FIFO (named pipe), not a regular file" "fs.write refuses a FIFO"
expect_out "append-fifo	error	invalid_path	fs.write: pipe: is a FIFO (named pipe), not a regular file" "fs.write append refuses a FIFO"
expect_out "append-sock	error	invalid_path	fs.write: sock: is a socket, not a regular file" "fs.write append refuses a socket"
expect_out "$(printf 'read-plain\tok\t6\thello')" "a regular file still reads"
expect_out "append-plain	ok	5" "a regular file still appends"
expect_out "list	pipe	other" "fs.list shows the FIFO without opening it"
[ -p "$WS/data/pipe" ] && ok "the FIFO is still a FIFO" || fail "the FIFO was replaced"
[ "$(cat "$WS/data/plain.txt")" = "$(printf 'hello\nmore')" ] && ok "append wrote" || fail "append: $(cat "$WS/data/plain.txt")"
finish

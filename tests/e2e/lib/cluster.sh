# Several daemons sharing one workspace through PostgreSQL (sourced after
# common.sh, daemon_lib.sh and pg.sh; call pg_start first).
#
# Each host is a separate workspace folder $WS/NAME with its own copy of
# $WS/automations/*.lua, its own .luagent/ and data/, and a luagent.lua
# that names the shared database: as on real hosts, only PostgreSQL is
# shared. CL_LEASE (default 3) is cluster.lease_s; CL_URL overrides the
# database URL (a host in a network namespace reaches it at a veth address).
[ -n "${LUAGENT_E2E_CLUSTER:-}" ] && return 0
LUAGENT_E2E_CLUSTER=1

# cl_host NAME [URL]: makes (or refreshes) host NAME's workspace.
cl_host() {
  local n=$1 url=${2:-${CL_URL:-$PG_URL}}
  mkdir -p "$WS/$n/automations" "$WS/$n/data"
  cp "$WS"/automations/*.lua "$WS/$n/automations/" 2>/dev/null
  cat >"$WS/$n/luagent.lua" <<LUA
return {
  cluster = { postgres = "$url", node = "$n", lease_s = ${CL_LEASE:-3} },
  http_allow = { "127.0.0.1" },
}
LUA
}

# cl_start NAME [PREFIX...]: starts host NAME's daemon (PREFIX: e.g. ip netns
# exec NS); its pid is in CLPID_NAME, its output in $WS/NAME.log.
cl_start() {
  local n=$1
  shift
  local before
  before=$(grep -c 'luagent daemon .* (pid' "$WS/$n.log" 2>/dev/null)
  (cd "$WS/$n" && exec "$@" "$LUAGENT" --workspace "$WS/$n" daemon --grace 3s --kill-grace 1s) \
    >>"$WS/$n.log" 2>&1 &
  local pid=$!
  eval "CLPID_$n=$pid"
  PIDS="$PIDS $pid"
  wait_for 15 "[ \$(grep -c 'luagent daemon .* (pid' '$WS/$n.log') -gt ${before:-0} ]" ||
    fail "daemon $n did not start: $(tail -5 "$WS/$n.log")"
}

# cl_stop NAME: SIGTERM, expect exit 0.
cl_stop() {
  local pid
  eval "pid=\$CLPID_$1"
  kill -TERM "$pid" 2>/dev/null
  wait "$pid"
  local rc=$?
  [ "$rc" = 0 ] || fail "daemon $1 exited $rc after SIGTERM: $(tail -5 "$WS/$1.log")"
  if grep -Eq "AddressSanitizer|LeakSanitizer|runtime error:|ended unexpectedly" "$WS/$1.log"; then
    fail "sanitizer or worker trouble in $1's log: $(grep -E -m3 "Sanitizer|runtime error|unexpectedly" "$WS/$1.log")"
  fi
}

# cl_kill NAME: SIGKILL (the host dies; its workers die with it).
cl_kill() {
  local pid
  eval "pid=\$CLPID_$1"
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}

# A local HTTP server on 127.0.0.1:$HTTP_PORT (daemon_lib's), in the root
# namespace; `cl_http_in NS` starts another on the same port inside NS, so
# one automation file reaches "its host's" server everywhere.
cl_http_in() {
  ip netns exec "$1" python3 "$WS/httpd.py" "$HTTP_PORT" 2>/dev/null &
  PIDS="$PIDS $!"
  wait_for 5 "ip netns exec '$1' bash -c '(echo > /dev/tcp/127.0.0.1/$HTTP_PORT) 2>/dev/null'" ||
    fail "http server in $1 did not start"
}

# cl_noting_job NAME [OPTIONS [AFTER]]: automations/NAME.lua, a run of about
# 6 s (20 slow requests to start_http's server) that notes "begin", each
# "tick" and "end" as "WHAT NODE ATTEMPT UNIXTIME" in data/NAME.txt of the
# host running it, so a test can tell who ran what and when. OPTIONS are
# more fields of the automation ('on_lost = "rerun",'); AFTER is Lua run
# after the last note.
cl_noting_job() {
  # every = "1h" falls due at the top of each hour: a test that runs across
  # it sees a second slot fire (cluster_kill failed so once, begun at
  # xx:59:55). Near one, wait until it has passed.
  local into=$(( $(date +%s) % 3600 ))
  [ "$into" -lt 3480 ] || sleep $(( 3600 - into + 1 ))
  cat >"$WS/automations/$1.lua" <<LUA
return { every = "1h", ${2:-} timeout = "60s", run = function(ctx)
  local function note(what)
    tools.call("fs.write", { path = "$1.txt", append = true, content = string.format(
      "%s %s %d %.3f\\n", what, ctx.node, ctx.trigger.attempt or 1, tools.call("time.now", {}).unix) })
  end
  note("begin")
  for i = 1, 20 do
    tools.call("http.request", { url = "http://127.0.0.1:$HTTP_PORT/slow?d=0.3" })
    note("tick")
  end
  note("end")
  ${3:-}
  return "done"
end }
LUA
}

# A throwaway PostgreSQL for the cluster tests (sourced after common.sh).
#
# pg_start: initdb in a new folder under $WS, a server on a free loopback
# port (and a Unix socket in that folder), stopped and removed by the
# test's cleanup. Sets PG_URL (postgresql://luagent@127.0.0.1:PORT/luagent),
# PG_PORT, PG_DIR and PG_BIN. PG_LISTEN may name more addresses to listen
# on (a veth address for network-namespace tests); they are trusted like
# loopback.
#
# There is no skip: a test that cannot start PostgreSQL fails, naming why
# (scripts/install-deps.sh installs Debian's postgresql for `make test`).
# As root, the server runs as the `postgres` user (initdb refuses root).
[ -n "${LUAGENT_E2E_PG:-}" ] && return 0
LUAGENT_E2E_PG=1

pg_die() {
  echo "FAIL: cannot start the test PostgreSQL: $*" >&2
  exit 1
}

pg_start() {
  PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -n "$PG_BIN" ] && [ -x "$PG_BIN/initdb" ] ||
    pg_die "no initdb under /usr/lib/postgresql/*/bin (install Debian's postgresql: make deps)"
  PG_DIR=$(mktemp -d /tmp/luagent-pg.XXXXXX)
  PG_AS=""
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || pg_die "running as root, and there is no postgres user"
    chown postgres "$PG_DIR"
    PG_AS="runuser -u postgres --"
  fi
  $PG_AS "$PG_BIN/initdb" -D "$PG_DIR/data" -U luagent -A trust --no-sync -E UTF8 \
    --locale=C >"$PG_DIR/initdb.log" 2>&1 || pg_die "initdb failed: $(tail -5 "$PG_DIR/initdb.log")"
  PG_PORT=$(free_port)
  listen="127.0.0.1${PG_LISTEN:+,$PG_LISTEN}"
  {
    echo "listen_addresses = '$listen'"
    echo "port = $PG_PORT"
    echo "unix_socket_directories = '$PG_DIR'"
    echo "fsync = off"
    echo "synchronous_commit = off"
    echo "full_page_writes = off"
    echo "max_connections = 200"
    echo "shared_buffers = 32MB"
    echo "log_min_messages = warning"
  } >>"$PG_DIR/data/postgresql.conf"
  # Loopback and the test's namespaces' addresses only.
  echo "host all all 0.0.0.0/0 trust" >>"$PG_DIR/data/pg_hba.conf"
  $PG_AS "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 30 start \
    >"$PG_DIR/pg_ctl.log" 2>&1 ||
    pg_die "pg_ctl start failed: $(tail -5 "$PG_DIR/server.log" 2>/dev/null)"
  PG_STARTED=1
  "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U luagent luagent 2>"$PG_DIR/createdb.log" ||
    pg_die "createdb failed: $(cat "$PG_DIR/createdb.log")"
  PG_URL="postgresql://luagent@127.0.0.1:$PG_PORT/luagent"
  export PG_URL PG_PORT PG_DIR PG_BIN
}

# psql against the test database: pg_sql "SELECT ...". -A -t: bare values.
pg_sql() {
  "$PG_BIN/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U luagent luagent -c "$1"
}

pg_stop() {
  [ -n "${PG_STARTED:-}" ] || return 0
  $PG_AS "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate -w -t 20 stop >/dev/null 2>&1
  PG_STARTED=""
  rm -rf "$PG_DIR"
}

# common.sh's cleanup, and then the server (after the daemons are gone).
cleanup() {
  for p in $PIDS; do kill "$p" 2>/dev/null; done
  for p in $PIDS; do wait "$p" 2>/dev/null; done
  pg_stop
  rm -rf "$WS"
}

#!/bin/bash
# e2e: the audit anchor (.luagent/audit.anchor) catches what the chain inside
# the database cannot: the last rows deleted and the head rewritten to match
# (unsigned), an older signed head put back, and a head pinned elsewhere
# (`audit head`, then `audit verify --expect`) that is no longer in the chain.
# The rewrites are made with the sqlite3 CLI, as an attacker with write
# access to state.db would; each must make `audit verify` exit 1 naming the
# first missing or changed row. Also: a missing anchor file is a warning (an
# error with --strict), a garbled anchor line is an error naming the line.
. "$(dirname "$0")/lib/common.sh"
command -v sqlite3 >/dev/null || { echo "SKIP: sqlite3 CLI not installed"; exit 0; }
DB="$WS/.luagent/state.db"
AN="$WS/.luagent/audit.anchor"

# Five reads: five rows per run.
cat > "$WS/t.lua" <<'LUA'
for i = 1, 5 do tools.call("echo", { i = i }) end
LUA
run_script() { (cd "$WS" && "$LUAGENT" run t.lua </dev/null >/dev/null 2>&1) || fail "script failed"; }
# cut_to N: deletes every row after N and rewrites the head to match, as
# an attacker who cannot sign would. (rows= is set separately: the column
# does not exist before the anchor change, and the head must still match.)
cut_to() {
  sqlite3 "$DB" "DELETE FROM audit WHERE seq > $1; UPDATE audit_head SET seq = $1, hash = (SELECT hash FROM audit WHERE seq = $1), sig = NULL" || fail "sqlite3"
  sqlite3 "$DB" "UPDATE audit_head SET rows = $1" 2>/dev/null
}
verify_fails() { # $1 = row, $2 = text, $3 = what, rest = verify args
  local row=$1 text=$2 what=$3
  shift 3
  if expect_rc 1 "$LUAGENT" audit verify "$@"; then
    err_has "audit chain broken at row $row: " && err_has "$text" && pass "$what: $(cat "$WS/.err")"
  fi
}
save() { rm -f "$WS/$1.db"; sqlite3 "$DB" ".backup '$WS/$1.db'"; cp "$AN" "$WS/$1.anchor"; }
restore() { rm -f "$DB-wal" "$DB-shm"; cp "$WS/$1.db" "$DB"; cp "$WS/$1.anchor" "$AN"; }

# --- an untouched chain passes; the head is printed for pinning ----------
run_script
expect_rc 0 "$LUAGENT" audit head && PIN5=$(cat "$WS/.out")
grep -Eq '^seq=5 rows=5 hash=[0-9a-f]{64}$' <<<"$PIN5" && pass "audit head: $PIN5" || fail "audit head printed '$PIN5'"
expect_rc 0 "$LUAGENT" audit head --json &&
  python3 -c 'import json,sys; h=json.load(open(sys.argv[1])); assert h["seq"]==5 and h["rows"]==5 and len(h["hash"])==64 and h["head"]==sys.argv[2], h' "$WS/.out" "$PIN5" &&
  pass "audit head --json" || fail "audit head --json: $(cat "$WS/.out")"
[ -f "$AN" ] && [ "$(wc -l <"$AN")" -eq 1 ] && grep -q "^$PIN5 ts=" "$AN" && pass "the run's exit anchored its head" || fail "anchor file after one run: $(cat "$AN" 2>&1)"
[ "$(stat -c %a "$AN")" = 600 ] || fail "audit.anchor is not 0600"
run_script
expect_rc 0 "$LUAGENT" audit head && PIN10=$(cat "$WS/.out")
H10=${PIN10##*hash=}
[ "$(wc -l <"$AN")" -eq 2 ] || fail "two runs wrote $(wc -l <"$AN") anchor lines"
expect_rc 0 "$LUAGENT" audit verify && out_has "intact: 10 rows" && out_has "anchored up to row 10" && pass "untouched chain passes"
expect_rc 0 "$LUAGENT" audit verify --expect "$PIN5" --strict && pass "an older pinned head is still in the chain"
expect_rc 0 "$LUAGENT" audit verify --expect "$PIN10" && pass "the current pinned head is in the chain"
expect_rc 0 "$LUAGENT" audit verify --expect "$(tail -n 1 "$AN")" && pass "an anchor line works as --expect"
expect_rc 0 "$LUAGENT" audit verify --json && python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["intact"] and r["anchored_seq"]==10 and r["anchors"]==2, r' "$WS/.out" && pass "verify --json" || fail "verify --json: $(cat "$WS/.out")"
# Nothing new since the last anchor: verify and head add no line.
[ "$(wc -l <"$AN")" -eq 2 ] || fail "read-only commands wrote anchor lines"
save pristine

# --- the last rows deleted, the head rewritten to match (unsigned) -------
cut_to 7
verify_fails 8 "row 8 is missing: the anchor file (line 2) records seq 10 with hash ${H10:0:16}..., the chain ends at seq 7" "truncation with a consistent head"
# The pinned head alone catches it too, with no anchor file.
rm -f "$AN"
verify_fails 8 "row 8 is missing: the expected head records seq 10" "truncation caught by --expect without the anchor file" --expect "$PIN10"
# Without the anchor file and without --expect nothing can tell: a warning, not a silent pass.
expect_rc 0 "$LUAGENT" audit verify && err_has "warning: no anchor file" && err_has "cannot be detected" && pass "missing anchor file warns"
expect_rc 1 "$LUAGENT" audit verify --strict && err_has "no anchor file" && pass "missing anchor file fails with --strict"
restore pristine

# --- truncated, then luagent goes on writing: the chain is consistent again,
# but row 10 is not the row that was anchored.
cut_to 6
run_script
verify_fails 10 "row 10 does not match the anchor file (line 2)" "truncation followed by new rows" && err_has "rewritten after row 5"
restore pristine

# --- a garbled anchor file is an error naming the line -------------------
sed -i '1s/hash=/hsh=/' "$AN"
expect_rc 1 "$LUAGENT" audit verify && err_has "audit.anchor, line 1: unknown field 'hsh'" && pass "garbled anchor line: $(cat "$WS/.err")"
restore pristine
printf 'seq=12 rows=12 hash=%s' "$H10" >>"$AN"
expect_rc 1 "$LUAGENT" audit verify && err_has "line 3, is incomplete" && pass "anchor line without its newline"
restore pristine
expect_rc 2 "$LUAGENT" audit verify --expect "seq=10 hash=xyz" && err_has "--expect" && err_has "64 lowercase hex" && pass "garbled --expect is a usage error"

# --- signing on: an older signed head put back, newer rows deleted -------
cat >"$WS/luagent.lua" <<'LUA'
return { audit = { sign = true } }
LUA
run_script # rows 11..15, head signed
expect_rc 0 "$LUAGENT" audit verify && out_has "head signature valid" || fail "signed chain does not verify"
grep -q ' sig=[0-9a-f]\{128\}$' <(tail -n 1 "$AN") && pass "signed anchor line" || fail "last anchor line is not signed: $(tail -n 1 "$AN")"
OLD=$(sqlite3 "$DB" "SELECT seq || '|' || hash || '|' || sig FROM audit_head")
orows=$(sqlite3 "$DB" "SELECT rows FROM audit_head" 2>/dev/null)
run_script # rows 16..20
IFS='|' read -r oseq ohash osig <<<"$OLD"
sqlite3 "$DB" "DELETE FROM audit WHERE seq > $oseq; UPDATE audit_head SET seq = $oseq, hash = '$ohash', sig = '$osig'" || fail "sqlite3"
[ -n "$orows" ] && sqlite3 "$DB" "UPDATE audit_head SET rows = $orows"
verify_fails 16 "row 16 is missing: the anchor file (line 4, signed with the audit key) records seq 20" "older signed head put back"
expect_rc 1 "$LUAGENT" audit verify --expect "$PIN10" >/dev/null && err_has "row 16 is missing" || fail "--expect passed with rows cut off"

finish

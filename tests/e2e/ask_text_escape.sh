# Issue 18 item 12 (terminal side): what the model says cannot drive the
# operator's terminal. C0 controls, DEL, C1 controls (U+009B is an 8-bit
# CSI) and bidi overrides are shown escaped on stdout; plain Unicode is not.
. "$(dirname "$0")/lib/mock.sh" "$1"
start_mock m '{"steps":[{"text":"a\u001b[2Jb\u009b31mc\u202ed\u2066e\u0007f\u007fg caf\u00e9 \u65e5\u672c"}]}'
config "providers = { $(provider openai $PORT_m) }"
ask "say it"
expect_rc 0 "ask answered"
expect_out 'a\x1b[2Jb\u009b31mc\u202ed\u2066e\x07f\x7fg' "every control is visible, none raw"
expect_out "café 日本" "ordinary text is untouched"
if LC_ALL=C grep -qP '[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\xaa-\xae]|\xe2\x81[\xa6-\xa9]' "$WS/out"; then
  fail "a raw control reached stdout"
else ok "no raw control byte on stdout"; fi
finish

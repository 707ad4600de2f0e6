#!/bin/sh
# Skill selection benchmark. bench_select prints: the selection table on
# the dev splits (MetaTool, MetaTool with two examples per tool, Seal-Tools,
# the 75 Agent Skills, with examples too, three unrelated-request sets):
# top-1, top-3, the right skill put into the prompt, the unrelated
# requests that select a skill;
# the calibration curve of the confidence and a min_confidence sweep; the
# same with keyword selection only and with the mock OpenAI-compatible
# embedding server of the e2e tests (tests/e2e/skills_fake_embed.py, letter
# counts: it measures the endpoint path, not what a real model buys); the
# ranking table next to a plain BM25 baseline; selection latency at 10 /
# 1,000 / 12,000 skills for requests as asked and long ones (p99); load +
# index time of 10,000 SKILL.md skills. Then the same metatool run through
# the real CLI (`luagent skills select --batch` over a workspace of one
# SKILL.md per tool), scored by the dataset's score.py.
# Usage: bench/run_skills.sh BUILD_DIR   (data: ../shared/data/toolsel, or $TOOLSEL_DIR)
set -u
B=${1:-build}
cd "$(dirname "$0")/.."
D=${TOOLSEL_DIR:-../shared/data/toolsel}
[ -d "$D" ] || D=../../shared/data/toolsel   # a git worktree sits one level deeper
if [ ! -f "$D/score.py" ]; then
  echo "toolsel data not found (looked in ../shared/data/toolsel; set TOOLSEL_DIR)" >&2
  exit 1
fi
OUT=$(mktemp -d /tmp/luagent-bench-skills.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

python3 tests/e2e/skills_fake_embed.py "$OUT/qport" "$OUT/qembed.log" &
QFAKE=$!
for _ in $(seq 50); do [ -s "$OUT/qport" ] && break; sleep 0.1; done
BENCH_EMBED_URL="http://127.0.0.1:$(cat "$OUT/qport")/ok/v1" "$B/bench_select" "$D" "$OUT" || { kill "$QFAKE"; exit 1; }
kill "$QFAKE" 2>/dev/null

echo
echo "score.py on the same predictions (recall@1 recall@3 MRR@10):"
for ds in metatool sealtools; do
  for m in bm25-plain keyword embedding fused; do
    printf '  %-10s %-11s ' "$ds" "$m"
    python3 "$D/score.py" --queries "$D/$ds/queries.jsonl" --pred "$OUT/$ds.$m.jsonl" --json |
      python3 -c 'import json,sys; j=json.load(sys.stdin); print("%.4f %.4f %.4f" % (j["recall@1"], j["recall@3"], j["MRR@10"]))'
  done
done

# The CLI path: each metatool tool becomes skills/<name>/SKILL.md.
python3 - "$D/metatool/tools.jsonl" "$OUT/ws" <<'PY'
import json, os, re, sys
tools = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ws = sys.argv[2]
os.makedirs(ws + "/skills")
names = {}
for t in tools:
    n = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", t["name"]).lower()
    n = re.sub(r"[^a-z0-9_-]+", "-", n).strip("-") or "tool"
    if not n[0].isalpha():
        n = "t-" + n
    base, k = n, 2
    while n in names:
        n, k = "%s-%d" % (base, k), k + 1
    names[n] = t["id"]
    os.makedirs("%s/skills/%s" % (ws, n))
    with open("%s/skills/%s/SKILL.md" % (ws, n), "w") as f:
        f.write("---\nname: %s\ndescription: %s\n---\n" % (n, json.dumps(t["description"])))
json.dump(names, open(ws + "/names.json", "w"))
PY
start=$(date +%s.%N)
"$B/luagent" --workspace "$OUT/ws" skills select --batch "$D/metatool/queries.jsonl" > "$OUT/cli.jsonl" || exit 1
end=$(date +%s.%N)
python3 - "$OUT/ws/names.json" "$OUT/cli.jsonl" "$OUT/cli.ids.jsonl" <<'PY'
import json, sys
names = json.load(open(sys.argv[1]))
with open(sys.argv[3], "w") as out:
    for l in open(sys.argv[2]):
        r = json.loads(l)
        out.write(json.dumps({"id": r["id"], "ranked": [names[n] for n in r["ranked"]]}) + "\n")
PY
printf '\nluagent skills select --batch (metatool, 199 SKILL.md skills, %s queries, %.2f s for the whole process):\n' \
  "$(wc -l < "$OUT/cli.jsonl")" "$(echo "$end - $start" | bc)"
python3 "$D/score.py" --queries "$D/metatool/queries.jsonl" --pred "$OUT/cli.ids.jsonl" | head -3

# Real SKILL.md files: the 75 public skills in ../shared/data/agent-skills
# (two requests per skill, gold = the skill's name).
A=$(dirname "$D")/agent-skills
if [ -f "$A/requests.jsonl" ]; then
  mkdir -p "$OUT/as" && cp -r "$A/skills" "$OUT/as/skills"
  printf '\nagent-skills (75 real SKILL.md skills, %s requests), recall@1 recall@3 MRR@10:\n' "$(wc -l < "$A/requests.jsonl")"
  for m in keyword embedding fused; do
    "$B/luagent" --workspace "$OUT/as" skills select --batch "$A/requests.jsonl" --mode "$m" > "$OUT/as.$m.jsonl" 2>/dev/null
    printf '  %-10s ' "$m"
    python3 "$D/score.py" --queries "$A/requests.jsonl" --pred "$OUT/as.$m.jsonl" --json |
      python3 -c 'import json,sys; j=json.load(sys.stdin); print("%.4f %.4f %.4f" % (j["recall@1"], j["recall@3"], j["MRR@10"]))'
  done
fi

# Cold and warm load of 10,000 SKILL.md skills with an HTTP embedding
# endpoint (the fake OpenAI-compatible server of the e2e tests, on
# 127.0.0.1): cold embeds every skill over HTTP and fills the cache in
# .luagent/state.db, warm reads every vector back from it.
python3 - "$D" "$OUT/big" <<'PY'
import json, os, sys
d, ws = sys.argv[1], sys.argv[2]
tools = [json.loads(l) for f in ("metatool", "sealtools") for l in open("%s/%s/tools.jsonl" % (d, f)) if l.strip()]
os.makedirs(ws + "/skills")
for i in range(10000):
    t = tools[i % len(tools)]
    n = "s%05d" % i
    os.makedirs("%s/skills/%s" % (ws, n))
    with open("%s/skills/%s/SKILL.md" % (ws, n), "w") as f:
        f.write("---\nname: %s\ndescription: %s\n---\nUse %s.\n" % (n, json.dumps(t["description"]), t["name"]))
PY
python3 tests/e2e/skills_fake_embed.py "$OUT/port" "$OUT/embed.log" &
FAKE=$!
for _ in $(seq 50); do [ -s "$OUT/port" ] && break; sleep 0.1; done
printf 'return { embeddings = { kind = "openai", base_url = "http://127.0.0.1:%s/ok/v1", model = "fake-26" } }\n' "$(cat "$OUT/port")" > "$OUT/big/luagent.lua"
printf '\nload + index 10,000 SKILL.md skills with an HTTP embedding endpoint (whole `luagent skills select` process: the index is built on first use):\n'
for run in cold warm; do
  : > "$OUT/embed.log"
  s=$(date +%s.%N)
  "$B/luagent" --workspace "$OUT/big" skills select "warm up" > /dev/null 2>&1
  e=$(date +%s.%N)
  printf '  %-5s %6.0f ms, %s texts sent to the endpoint\n' "$run" "$(echo "($e - $s) * 1000" | bc)" \
    "$(awk '{n += $2} END {print n + 0}' "$OUT/embed.log")"
done
kill "$FAKE" 2>/dev/null

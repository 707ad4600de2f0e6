/* cli_init.c - `luagent init [DIR]`: scaffold a working workspace.
 *
 * Writes a commented luagent.lua (with a scripted demo model, so `ask`
 * works offline), one skill with tools, one automation, hooks.lua with an
 * example, an empty data/ and a .gitignore for .luagent/. It never
 * overwrites: when any of the files already exists, it names every one of
 * them and writes nothing (exit 1). DIR is created when missing.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/* ---- the files ---------------------------------------------------------- */

/* clang-format off: each string line is one line of the file written */

static const char luagent_lua[] =
    "-- luagent.lua: the configuration of this workspace, written by `luagent init`.\n"
    "-- It is a Lua table, read with no tools available. A mistake is reported with\n"
    "-- its line and key. luagent's README describes every key (\"Reference\").\n"
    "return {\n"
    "  -- The model. \"demo\" is a scripted model: it answers from model_script.lua\n"
    "  -- instead of calling a server, so `luagent ask` and `luagent chat` work\n"
    "  -- offline. For a real model, put one of these in its place:\n"
    "  --   { name = \"openai\", kind = \"openai\", model = \"gpt-4o-mini\", api_key_env = "
    "\"OPENAI_API_KEY\" },\n"
    "  --   { name = \"claude\", kind = \"anthropic\", model = \"claude-sonnet-4-5\", api_key_env "
    "= \"ANTHROPIC_API_KEY\" },\n"
    "  --   { name = \"local\", kind = \"openai\", base_url = \"http://127.0.0.1:11434/v1\", model "
    "= \"qwen3\" },\n"
    "  providers = {\n"
    "    { name = \"demo\", kind = \"script\", file = \"model_script.lua\" },\n"
    "  },\n"
    "\n"
    "  -- A tool call at this impact or above needs a person's approval\n"
    "  -- (read < low < medium < high < critical); skills/todo has a \"high\" tool.\n"
    "  approval_threshold = \"high\",\n"
    "  -- Who approves: \"auto\" asks on the terminal and denies without one,\n"
    "  -- \"queue\" waits for `luagent approvals approve ID`, \"deny\" never approves.\n"
    "  approver = \"auto\",\n"
    "\n"
    "  -- Rules match a tool, a caller and arguments; deny beats escalate beats allow.\n"
    "  -- rules = {\n"
    "  --   { tool = \"fs.*\", caller = \"model\", args = { path = \"^private/\" },\n"
    "  --     action = \"deny\", reason = \"private/ is off limits to the model\" },\n"
    "  -- },\n"
    "\n"
    "  -- Where http.request may go; nowhere until you list hosts here.\n"
    "  -- http_allow = { \"api.example.com\" },\n"
    "\n"
    "  -- The limits of every run of a script, skill tool or automation.\n"
    "  limits = { memory_mb = 64, instructions = 100e6, deadline_s = 30 },\n"
    "}\n";

static const char model_script_lua[] =
    "-- model_script.lua: what the scripted \"demo\" model of luagent.lua answers.\n"
    "-- The first entry whose `match` appears in your message (any case) answers;\n"
    "-- an entry without `match` answers anything. Its turns are played one per\n"
    "-- model call: a turn calls a tool ({ tool = \"name\", args = { ... } }) or\n"
    "-- answers ({ text = \"...\" }); in text, %{result} is the latest tool result.\n"
    "return {\n"
    "  { match = \"clear\", turns = {\n"
    "      { tool = \"todo.clear\", args = {} },\n"
    "      { text = \"todo.clear said: %{result}\" },\n"
    "  } },\n"
    "  { match = \"todo\", turns = {\n"
    "      { tool = \"todo.list\", args = {} },\n"
    "      { text = \"Your todo list: %{result}\" },\n"
    "  } },\n"
    "  { turns = {\n"
    "      { text = \"I am the scripted demo model. Ask me what is on your todo list, or to clear "
    "it.\" },\n"
    "  } },\n"
    "}\n";

static const char hooks_lua[] =
    "-- hooks.lua: called for every tool call, whoever makes it (you, a script, a\n"
    "-- skill, an automation, the model). A hook may deny or escalate a call, or\n"
    "-- rewrite its arguments; it can never allow what a rule or the impact gate\n"
    "-- stopped. A hook that fails denies the call.\n"
    "return {\n"
    "  before_tool = function(call)\n"
    "    -- call = { tool =, caller = { kind =, name = }, args =, impact =, run_id = }\n"
    "    if call.tool == \"todo.add\" and #call.args.item > 200 then\n"
    "      return \"deny\", \"a todo item has at most 200 characters\"\n"
    "    end\n"
    "    -- Returning nothing means \"no objection\".\n"
    "  end,\n"
    "}\n";

static const char skill_lua[] =
    "-- skills/todo/skill.lua: a skill. Its tools are todo.add, todo.list and\n"
    "-- todo.clear. Loading this file only builds the table (no tools run); each\n"
    "-- tool runs in a fresh sandbox and reaches files through tools.call, which\n"
    "-- passes the security pipeline like any other call.\n"
    "return {\n"
    "  name = \"todo\",\n"
    "  description = \"Keep a todo list: add items, list them, clear the list\",\n"
    "  keywords = { \"todo\", \"task\" },          -- help selection pick this skill\n"
    "  examples = { \"add buy milk to my todo list\", \"what is on my todo list?\" },\n"
    "  tools = {\n"
    "    add = {\n"
    "      description = \"Add an item to the end of the todo list\",\n"
    "      params = { type = \"object\", required = { \"item\" },   -- JSON Schema, checked on "
    "every call\n"
    "                 properties = { item = { type = \"string\", minLength = 1 } } },\n"
    "      impact = \"low\",\n"
    "      run = function(args)\n"
    "        tools.call(\"fs.write\", { path = \"todo.txt\", content = args.item .. \"\\n\", "
    "append = true })\n"
    "        return { added = args.item }\n"
    "      end,\n"
    "    },\n"
    "    list = {\n"
    "      description = \"The items on the todo list, oldest first\",\n"
    "      params = { type = \"object\", properties = {} },\n"
    "      impact = \"read\",                     -- no side effects\n"
    "      run = function()\n"
    "        local items = {}\n"
    "        local ok, file = pcall(tools.call, \"fs.read\", { path = \"todo.txt\" })\n"
    "        if ok then\n"
    "          for line in file.content:gmatch(\"[^\\n]+\") do items[#items + 1] = line end\n"
    "        elseif file.code ~= \"not_found\" then\n"
    "          error(file)                          -- anything but \"no list yet\"\n"
    "        end\n"
    "        return { count = #items, items = json.array(items) }\n"
    "      end,\n"
    "    },\n"
    "    clear = {\n"
    "      description = \"Remove every item from the todo list\",\n"
    "      params = { type = \"object\", properties = {} },\n"
    "      impact = \"high\",                     -- needs approval (luagent.lua)\n"
    "      run = function()\n"
    "        tools.call(\"fs.write\", { path = \"todo.txt\", content = \"\" })\n"
    "        return { cleared = true }\n"
    "      end,\n"
    "    },\n"
    "  },\n"
    "}\n";

static const char skill_test_lua[] =
    "-- skills/todo/todo_test.lua: tests of the todo skill. `luagent test` runs\n"
    "-- every *_test.lua offline: each test gets an empty data/ of its own, a\n"
    "-- scripted model (model.script) and fakes for the approver and the clock.\n"
    "test(\"add, then list\", function()\n"
    "  tools.call(\"todo.add\", { item = \"buy milk\" })\n"
    "  tools.call(\"todo.add\", { item = \"call Sam\" })\n"
    "  expect(tools.call(\"todo.list\", {})).to_equal({ count = 2, items = { \"buy milk\", \"call Sam\" } })\n"
    "end)\n"
    "\n"
    "test(\"the hook refuses an item over 200 characters\", function()\n"
    "  expect(function() tools.call(\"todo.add\", { item = string.rep(\"x\", 201) }) end).to_raise(\"denied\")\n"
    "end)\n"
    "\n"
    "test(\"clear has impact high: it runs only once approved\", function()\n"
    "  tools.call(\"todo.add\", { item = \"buy milk\" })\n"
    "  expect(function() tools.call(\"todo.clear\", {}) end).to_raise(\"denied\")\n"
    "  fake.approver { [\"todo.clear\"] = \"approve\" }\n"
    "  tools.call(\"todo.clear\", {})\n"
    "  expect(tools.call(\"todo.list\", {}).count).to_be(0)\n"
    "  expect(#approvals(\"todo.clear\")).to_be(2) -- both requests reached the approver\n"
    "end)\n"
    "\n"
    "test(\"the model adds an item\", function()\n"
    "  model.script { { tool = \"todo.add\", args = { item = \"water the plants\" } }, { text = \"Added.\" } }\n"
    "  expect(delegate(\"add water the plants to my todo list\", { tools = { \"todo.*\" } })).to_be(\"Added.\")\n"
    "  expect(calls(\"todo.add\")[1].caller.kind).to_be(\"model\")\n"
    "end)\n"
    "\n"
    "test(\"the daily digest counts the items\", function()\n"
    "  tools.call(\"todo.add\", { item = \"buy milk\" })\n"
    "  fake.clock(\"2026-12-01T00:00:00Z\")\n"
    "  local runs = clock.advance(\"1d\") -- cron \"0 9 * * *\" fires once a day\n"
    "  expect(#runs).to_be(1)\n"
    "  expect(runs[1].result).to_equal({ count = 1 })\n"
    "  expect(runs[1].state).to_equal({ runs = 1 })\n"
    "end)\n";

static const char automation_lua[] =
    "-- automations/todo_digest.lua: an automation. `luagent daemon` runs it on its\n"
    "-- trigger; `luagent automations run todo_digest` runs it now.\n"
    "return {\n"
    "  name = \"todo_digest\",\n"
    "  description = \"Every morning at 09:00, say how many items are on the todo list\",\n"
    "  cron = \"0 9 * * *\",                    -- or every = \"1h\", at = \"...\", on = "
    "\"event\"\n"
    "  run = function(ctx)\n"
    "    local todo = tools.call(\"todo.list\", {})\n"
    "    print(os.date(\"!%Y-%m-%d\", ctx.now) .. \": \" .. todo.count .. \" item(s) on the "
    "list\")\n"
    "    ctx.state.runs = (ctx.state.runs or 0) + 1   -- kept between runs\n"
    "    return { count = todo.count }          -- recorded in the run journal\n"
    "  end,\n"
    "}\n";

static const char gitignore[] =
    "# luagent's state: runs, memory, approvals, the audit chain, secrets' key\n"
    ".luagent/\n";

/* In the order they are printed; NULL text = a folder. */
static const struct {
  const char *path;
  const char *text;
} files[] = {
    {"luagent.lua", luagent_lua},
    {"model_script.lua", model_script_lua},
    {"hooks.lua", hooks_lua},
    {"skills/todo/skill.lua", skill_lua},
    {"skills/todo/todo_test.lua", skill_test_lua},
    {"automations/todo_digest.lua", automation_lua},
    {"data", NULL},
    {".gitignore", gitignore},
};
/* clang-format on */
#define NFILES (sizeof files / sizeof files[0])

/* ---- helpers ------------------------------------------------------------ */

/* "DIR/name", or "name" when DIR is "." (for messages). */
static void show_path(char *out, size_t n, const char *dir, const char *name) {
  if (!strcmp(dir, "."))
    snprintf(out, n, "%s", name);
  else
    snprintf(out, n, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", name);
}

/* mkdir -p: creates each missing folder of path. Returns 0 or -1 with errno;
 * bad names the component that failed. Unlike util_mkdirs, a file where a
 * folder goes is an error (ENOTDIR) here, not a silent success. */
static int mkdirs(const char *path, char *bad, size_t n) {
  char buf[4096];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
    errno = ENAMETOOLONG;
    snprintf(bad, n, "%s", path);
    return -1;
  }
  for (char *p = buf + 1;; p++) {
    if (*p == '/' || *p == '\0') {
      char c = *p;
      *p = '\0';
      struct stat st;
      if (mkdir(buf, 0777) && errno != EEXIST) {
        snprintf(bad, n, "%s", buf);
        return -1;
      }
      if (stat(buf, &st) || !S_ISDIR(st.st_mode)) {
        if (!stat(buf, &st)) errno = ENOTDIR; /* exists, but is a file */
        snprintf(bad, n, "%s", buf);
        return -1;
      }
      *p = c;
      if (!c) break;
    }
  }
  return 0;
}

/* The parent folder of a relative path ("skills/todo/skill.lua" ->
 * "skills/todo"); "" when there is none. */
static void parent_of(char *out, size_t n, const char *rel) {
  const char *slash = strrchr(rel, '/');
  size_t len = slash ? (size_t)(slash - rel) : 0;
  if (len >= n) len = n - 1;
  memcpy(out, rel, len);
  out[len] = '\0';
}

/* Creates one file with O_EXCL (never replacing one that appeared since the
 * check) and writes it whole; a partial file is removed. */
static int write_new(const char *path, const char *text, char *why, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    snprintf(why, n, "%s", strerror(errno));
    return -1;
  }
  size_t len = strlen(text), done = 0;
  while (done < len) {
    ssize_t w = write(fd, text + done, len - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      snprintf(why, n, "%s", w < 0 ? strerror(errno) : "short write");
      close(fd);
      unlink(path);
      return -1;
    }
    done += (size_t)w;
  }
  if (close(fd)) {
    snprintf(why, n, "%s", strerror(errno));
    unlink(path);
    return -1;
  }
  return 0;
}

/* ---- the command -------------------------------------------------------- */

int cli_init(const struct cli_opts *o, int argc, char **argv) {
  const char *dir = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      printf("usage: luagent init [DIR]\n"
             "  creates a working workspace in DIR (default: --workspace, or the current\n"
             "  folder): luagent.lua with a scripted demo model, skills/todo (with its\n"
             "  tests), automations/todo_digest.lua, hooks.lua, data/ and .gitignore. Existing files are never\n"
             "  overwritten: if any is in the way, init names it and writes nothing.\n");
      return 0;
    }
    if (argv[i][0] == '-' && argv[i][1])
      return cli_fail(2, "init: unknown option %s (usage: luagent init [DIR])", argv[i]);
    if (dir) return cli_fail(2, "init: one folder only (usage: luagent init [DIR])");
    dir = argv[i];
  }
  if (!dir) dir = o->workspace && *o->workspace ? o->workspace : ".";
  if (!*dir) return cli_fail(2, "init: the folder name is empty");
  if (strlen(dir) > 3000) return cli_fail(2, "init: the folder name is too long");

  /* Refuse before writing anything: every file in the way is named. */
  char full[4096], shown[4096];
  int clashes = 0;
  for (size_t i = 0; i < NFILES; i++) {
    snprintf(full, sizeof full, "%s/%s", dir, files[i].path);
    struct stat st;
    if (lstat(full, &st)) continue;
    if (!files[i].text && S_ISDIR(st.st_mode)) continue; /* data/ may exist */
    show_path(shown, sizeof shown, dir, files[i].path);
    fprintf(stderr, "luagent: init: %s already exists\n", shown);
    clashes++;
  }
  if (clashes)
    return cli_fail(
        1, "init: nothing was written: %d file(s) in the way (move them, or init another folder)",
        clashes);

  char bad[4096];
  if (mkdirs(dir, bad, sizeof bad))
    return cli_fail(1, "init: cannot create folder %s: %s", bad, strerror(errno));
  for (size_t i = 0; i < NFILES; i++) {
    char rel[256];
    if (files[i].text)
      parent_of(rel, sizeof rel, files[i].path);
    else
      snprintf(rel, sizeof rel, "%s", files[i].path);
    if (*rel) {
      snprintf(full, sizeof full, "%s/%s", dir, rel);
      if (mkdirs(full, bad, sizeof bad))
        return cli_fail(1, "init: cannot create folder %s: %s", bad, strerror(errno));
    }
    show_path(shown, sizeof shown, dir, files[i].path);
    if (!files[i].text) {
      printf("created %s/\n", shown);
      continue;
    }
    snprintf(full, sizeof full, "%s/%s", dir, files[i].path);
    char why[256];
    if (write_new(full, files[i].text, why, sizeof why))
      return cli_fail(1, "init: cannot write %s: %s", shown, why);
    printf("created %s\n", shown);
  }
  if (strcmp(dir, "."))
    printf("next: cd %s && luagent skills list (the README's tutorial walks through it)\n", dir);
  else
    printf("next: luagent skills list (the README's tutorial walks through it)\n");
  return 0;
}

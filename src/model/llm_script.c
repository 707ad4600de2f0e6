/* llm_script.c - the scripted provider (kind = "script"): answers come from
 * a table of turns instead of the network, so ask, chat, delegate() and
 * approvals can be tried offline from any folder, and skills tested with a
 * model whose every move is known (luagent test). The answer goes through
 * the same llm__ helpers as a real stream, so callbacks, caps, tool-name
 * mapping and the loop above see no difference. The format is in llm.h. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "llm_impl.h"
#include "config.h"
#include "util.h"

#define SCRIPT_FILE_MAX ((size_t)4 << 20)

static const char *const turn_keys[] = {"text", "tool", "args", "tools", "refusal",
                                        "error", "finish", NULL};

static int known(const char *k, const char *const *list) {
  for (; *list; list++)
    if (!strcmp(k, *list)) return 1;
  return 0;
}

/* An empty Lua table arrives as [] or {}: both mean "no arguments". */
static int args_ok(const cJSON *a) {
  return cJSON_IsObject(a) || cJSON_IsString(a) || (cJSON_IsArray(a) && !cJSON_GetArraySize(a));
}

static int check_call(const cJSON *c, const char *where, struct err *e) {
  const cJSON *tool = cJSON_GetObjectItem(c, "tool"), *args = cJSON_GetObjectItem(c, "args");
  if (!cJSON_IsString(tool) || !tool->valuestring[0])
    return err_set(e, ERR_INVALID, "config", "%s.tool: expected a tool name", where);
  if (args && !args_ok(args))
    return err_set(e, ERR_INVALID, "config",
                   "%s.args: expected a table of arguments or a JSON string", where);
  return 0;
}

static int check_turn(const cJSON *t, const char *where, struct err *e) {
  if (!cJSON_IsObject(t))
    return err_set(e, ERR_INVALID, "config", "%s: expected a table (a turn)", where);
  if (cJSON_GetObjectItem(t, "$function"))
    return err_set(e, ERR_INVALID, "config",
                   "%s: is a function; a script holds data only (turns of text and tool calls)",
                   where);
  if (!t->child)
    return err_set(e, ERR_INVALID, "config",
                   "%s: is empty; give text, tool, tools, refusal, error or finish", where);
  const cJSON *it;
  cJSON_ArrayForEach(it, t) {
    if (!known(it->string, turn_keys))
      return err_set(e, ERR_INVALID, "config",
                     "%s: unknown key '%s' (known: text, tool, args, tools, refusal, error, "
                     "finish)",
                     where, it->string);
    if ((!strcmp(it->string, "text") || !strcmp(it->string, "refusal") ||
         !strcmp(it->string, "error")) &&
        !cJSON_IsString(it))
      return err_set(e, ERR_INVALID, "config", "%s.%s: expected a string", where, it->string);
  }
  const cJSON *tool = cJSON_GetObjectItem(t, "tool"), *tools = cJSON_GetObjectItem(t, "tools");
  const cJSON *fin = cJSON_GetObjectItem(t, "finish");
  if (cJSON_GetObjectItem(t, "error") && t->child->next)
    return err_set(e, ERR_INVALID, "config", "%s: an error turn has nothing else", where);
  if (cJSON_GetObjectItem(t, "args") && !tool)
    return err_set(e, ERR_INVALID, "config", "%s: args without tool", where);
  if (tool && tools)
    return err_set(e, ERR_INVALID, "config", "%s: give tool or tools, not both", where);
  if (tool && check_call(t, where, e)) return e->rc;
  if (tools) {
    if (!cJSON_IsArray(tools) || !cJSON_GetArraySize(tools))
      return err_set(e, ERR_INVALID, "config", "%s.tools: expected a list of {tool=, args=}",
                     where);
    int i = 0;
    cJSON_ArrayForEach(it, tools) {
      char w[600];
      snprintf(w, sizeof w, "%s.tools[%d]", where, ++i);
      if (!cJSON_IsObject(it))
        return err_set(e, ERR_INVALID, "config", "%s: expected {tool=, args=}", w);
      const cJSON *k;
      cJSON_ArrayForEach(k, it) if (strcmp(k->string, "tool") && strcmp(k->string, "args")) return
          err_set(e, ERR_INVALID, "config", "%s: unknown key '%s' (known: tool, args)", w,
                  k->string);
      if (check_call(it, w, e)) return e->rc;
    }
  }
  if (fin && !(cJSON_IsString(fin) &&
               (!strcmp(fin->valuestring, "stop") || !strcmp(fin->valuestring, "length"))))
    return err_set(e, ERR_INVALID, "config", "%s.finish: expected \"stop\" or \"length\"", where);
  return 0;
}

static int is_list(const cJSON *v) {
  return cJSON_IsArray(v) || (cJSON_IsObject(v) && !v->child);
}

static int check_turns(const cJSON *turns, const char *where, struct err *e) {
  if (!is_list(turns))
    return err_set(e, ERR_INVALID, "config", "%s: expected a list of turns", where);
  if (!cJSON_GetArraySize(turns))
    return err_set(e, ERR_INVALID, "config", "%s: has no turns", where);
  int i = 0;
  const cJSON *t;
  cJSON_ArrayForEach(t, turns) {
    char w[600];
    snprintf(w, sizeof w, "%s[%d]", where, ++i);
    if (cJSON_GetObjectItem(t, "turns") || cJSON_GetObjectItem(t, "match"))
      return err_set(e, ERR_INVALID, "config",
                     "%s: alternatives ({match=, turns=}) and turns do not mix in one list", w);
    if (check_turn(t, w, e)) return e->rc;
  }
  return 0;
}

int llm__script_check(const cJSON *turns, const char *where, struct err *e) {
  const cJSON *first = cJSON_IsArray(turns) ? turns->child : NULL;
  if (!cJSON_IsObject(first) || !cJSON_GetObjectItem(first, "turns"))
    return check_turns(turns, where, e);
  int i = 0;
  const cJSON *a;
  cJSON_ArrayForEach(a, turns) { /* alternatives */
    char w[600];
    snprintf(w, sizeof w, "%s[%d]", where, ++i);
    if (!cJSON_IsObject(a) || !cJSON_GetObjectItem(a, "turns"))
      return err_set(e, ERR_INVALID, "config",
                     "%s: expected an alternative {match = \"...\", turns = {...}}", w);
    const cJSON *k;
    cJSON_ArrayForEach(k, a) {
      if (!strcmp(k->string, "match")) {
        if (!cJSON_IsString(k) || !k->valuestring[0])
          return err_set(e, ERR_INVALID, "config", "%s.match: expected a non-empty string", w);
      } else if (strcmp(k->string, "turns")) {
        return err_set(e, ERR_INVALID, "config", "%s: unknown key '%s' (known: match, turns)", w,
                       k->string);
      }
    }
    char wt[640];
    snprintf(wt, sizeof wt, "%s.turns", w);
    if (check_turns(cJSON_GetObjectItem(a, "turns"), wt, e)) return e->rc;
  }
  return 0;
}

/* A script file: Lua data (config_eval_file, as luagent.lua) or JSON. */
static int load_file(const char *path, const char *name, cJSON **out, struct err *e) {
  *out = NULL;
  size_t n = strlen(name);
  if (n > 5 && !strcmp(name + n - 5, ".json")) {
    char *text = NULL;
    size_t len = 0;
    if (util_read_file(path, SCRIPT_FILE_MAX, &text, &len, e)) return e->rc;
    int rc = json_parse(text, len, JSON_NO_DUPLICATES, out, e);
    free(text);
    if (rc) err_prefix(e, "%s", name);
    return rc;
  }
  int rc = config_eval_file(path, name, out, e);
  if (!rc && !*out)
    rc = err_set(e, ERR_INVALID, "config", "%s: must return the list of turns", name);
  return rc;
}

int llm__script_config(const cJSON *o, const char *where, const char *basedir,
                       struct llm_provider *p, struct err *e) {
  const cJSON *turns = cJSON_GetObjectItem(o, "turns"), *file = cJSON_GetObjectItem(o, "file");
  if (turns && file)
    return err_set(e, ERR_INVALID, "config", "%s: give turns or file, not both", where);
  if (!turns && !file)
    return err_set(e, ERR_INVALID, "config",
                   "%s: a script provider needs turns = { ... } or file = \"turns.lua\"", where);
  if (turns) {
    char w[600];
    snprintf(w, sizeof w, "%s.turns", where);
    if (llm__script_check(turns, w, e)) return e->rc;
    p->script = cJSON_Duplicate(turns, 1);
    p->script_src = xstrdup(w);
    return 0;
  }
  if (!cJSON_IsString(file) || !file->valuestring[0])
    return err_set(e, ERR_INVALID, "config", "%s.file: expected a file name", where);
  char path[4096];
  const char *f = file->valuestring;
  if (f[0] == '/' || !basedir)
    snprintf(path, sizeof path, "%s", f);
  else
    snprintf(path, sizeof path, "%s/%s", basedir, f);
  cJSON *v = NULL;
  if (load_file(path, f, &v, e)) {
    err_prefix(e, "%s.file", where);
    return e->rc;
  }
  if (llm__script_check(v, f, e)) {
    cJSON_Delete(v);
    return e->rc;
  }
  p->script = v;
  p->script_src = xstrdup(f);
  return 0;
}

/* ---- answering */

/* The latest user message's text and how many assistant turns followed. */
static const char *latest_user(const cJSON *msgs, int *after) {
  const char *text = "";
  int n = 0;
  const cJSON *m;
  cJSON_ArrayForEach(m, msgs) {
    const cJSON *role = cJSON_GetObjectItem(m, "role");
    if (!cJSON_IsString(role)) continue;
    if (!strcmp(role->valuestring, "user")) {
      const cJSON *c = cJSON_GetObjectItem(m, "content");
      text = cJSON_IsString(c) ? c->valuestring : "";
      n = 0;
    } else if (!strcmp(role->valuestring, "assistant")) {
      n++;
    }
  }
  *after = n;
  return text;
}

static int contains_nocase(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (; *hay; hay++)
    if (!strncasecmp(hay, needle, n)) return 1;
  return !n;
}

/* The turn for this request from a static script (borrowed), or an error
 * naming the script and the turn it lacks. */
static int pick(const struct llm_provider *p, const struct llm_request *req, const cJSON **turn,
                struct err *e) {
  int after = 0;
  const char *user = latest_user(req->messages, &after);
  const cJSON *turns = p->script;
  const cJSON *first = cJSON_IsArray(turns) ? turns->child : NULL;
  if (cJSON_IsObject(first) && cJSON_GetObjectItem(first, "turns")) {
    const cJSON *a, *hit = NULL;
    cJSON_ArrayForEach(a, p->script) {
      const cJSON *m = cJSON_GetObjectItem(a, "match");
      if (!m || contains_nocase(user, m->valuestring)) {
        hit = a;
        break;
      }
    }
    if (!hit)
      return err_set(e, ERR_NOTFOUND, "provider_error",
                     "%s: no alternative of %s matches the message \"%.80s\" (add one without "
                     "match as the default)",
                     p->name, p->script_src, user);
    turns = cJSON_GetObjectItem(hit, "turns");
  }
  int n = cJSON_GetArraySize(turns);
  if (after >= n)
    return err_set(e, ERR_NOTFOUND, "provider_error",
                   "%s: %s has no turn %d for this message (it has %d); add one, e.g. { text = "
                   "\"done\" }",
                   p->name, p->script_src, after + 1, n);
  *turn = cJSON_GetArrayItem(turns, after);
  return 0;
}

int llm_script_pick(const cJSON *turns, const char *src, const struct llm_request *req,
                    const cJSON **turn, struct err *e) {
  struct llm_provider p = {.name = "script", .script = (cJSON *)turns, .script_src = (char *)src};
  return pick(&p, req, turn, e);
}

/* The content of the latest tool result, as text. */
static char *latest_result(const cJSON *msgs) {
  const cJSON *m, *hit = NULL;
  cJSON_ArrayForEach(m, msgs) {
    const cJSON *role = cJSON_GetObjectItem(m, "role");
    if (cJSON_IsString(role) && !strcmp(role->valuestring, "tool")) hit = m;
  }
  const cJSON *c = hit ? cJSON_GetObjectItem(hit, "content") : NULL;
  if (cJSON_IsString(c)) return xstrdup(c->valuestring);
  return c ? json_print(c, 0) : xstrdup("");
}

/* text with %{result} and %{user} filled in (caller frees). It stops one
 * byte past the answer cap, so llm__text names the cap instead of 10,000
 * placeholders first building gigabytes. */
static char *fill(const char *text, const struct llm_request *req) {
  struct sbuf b = {0};
  int after;
  const char *user = latest_user(req->messages, &after);
  char *result = NULL;
  size_t cap = req->max_answer_bytes ? req->max_answer_bytes : LLM_MAX_ANSWER;
  for (const char *t = text; *t && b.len <= cap;) {
    if (!strncmp(t, "%{result}", 9)) {
      if (!result) result = latest_result(req->messages);
      sbuf_append(&b, result, strlen(result));
      t += 9;
    } else if (!strncmp(t, "%{user}", 7)) {
      sbuf_append(&b, user, strlen(user));
      t += 7;
    } else {
      sbuf_append(&b, t, 1);
      t++;
    }
  }
  free(result);
  return b.s ? b.s : xstrdup("");
}

/* Streams s in pieces of a few words, never splitting a UTF-8 character,
 * so the operator sees text arrive as from a real model. */
static void emit_text(struct llm__stream *st, const char *s) {
  size_t n = strlen(s), i = 0;
  while (i < n) {
    size_t k = n - i < 24 ? n - i : 24;
    while (i + k < n && k > 1 && ((unsigned char)s[i + k] & 0xC0) == 0x80) k--;
    for (size_t j = k; j > 8 && i + k < n; j--)
      if (s[i + j - 1] == ' ') {
        k = j;
        break;
      }
    llm__text(st, s + i, k);
    i += k;
  }
}

static void emit_call(struct llm__stream *st, const struct llm_request *req, int index,
                      int nmsgs, const cJSON *c) {
  const char *name = cJSON_GetObjectItem(c, "tool")->valuestring;
  char wire[65], id[48];
  llm_wire_name(name, wire);
  /* A tool the request does not offer keeps its own name, so the loop
   * reports the tool the script named (as it would a model's mistake). */
  const char *on_wire = llm_full_name(req->tools, wire) ? wire : name;
  snprintf(id, sizeof id, "script_%d_%d", nmsgs, index);
  llm__tool_start(st, index, id, on_wire);
  const cJSON *a = cJSON_GetObjectItem(c, "args");
  char *text = cJSON_IsString(a) ? xstrdup(a->valuestring)
               : cJSON_IsObject(a) ? json_print(a, 0)
                                   : xstrdup("{}");
  size_t n = strlen(text), half = n / 2;
  while (half && ((unsigned char)text[half] & 0xC0) == 0x80) half--;
  llm__tool_args(st, index, text, half);
  llm__tool_args(st, index, text + half, n - half);
  free(text);
}

static long request_bytes(const struct llm_request *req) {
  long n = req->system ? (long)strlen(req->system) : 0;
  char *m = req->messages ? json_print(req->messages, 0) : NULL;
  char *t = req->tools ? json_print(req->tools, 0) : NULL;
  n += (m ? (long)strlen(m) : 0) + (t ? (long)strlen(t) : 0);
  free(m);
  free(t);
  return n;
}

int llm__script_attempt(const struct llm_provider *p, const struct llm_request *req,
                        struct llm__stream *st, struct err *e) {
  if (req->stop && *req->stop)
    return err_set(e, ERR_STOPPED, "stopped", "%s: model call stopped by the operator", p->name);
  cJSON *owned = NULL;
  const cJSON *turn = NULL;
  if (p->script_fn) {
    if (p->script_fn(p->script_ud, req, &owned, e)) {
      cJSON_Delete(owned);
      if (!e->code[0]) snprintf(e->code, sizeof e->code, "provider_error");
      return e->rc ? e->rc : ERR_FAIL;
    }
    if (check_turn(owned, "the scripted model's answer", e)) {
      cJSON_Delete(owned);
      snprintf(e->code, sizeof e->code, "provider_error");
      return e->rc;
    }
    turn = owned;
  } else if (pick(p, req, &turn, e)) {
    return e->rc;
  }
  int rc = 0;
  const cJSON *err = cJSON_GetObjectItem(turn, "error");
  if (err) {
    rc = err_set(e, ERR_FAIL, "provider_error", "%s: %s", p->name, err->valuestring);
    goto out;
  }
  long out_bytes = 0;
  const cJSON *text = cJSON_GetObjectItem(turn, "text");
  if (text) {
    char *t = fill(text->valuestring, req);
    out_bytes += (long)strlen(t);
    emit_text(st, t);
    free(t);
  }
  const cJSON *ref = cJSON_GetObjectItem(turn, "refusal");
  if (ref) llm__refusal(st, ref->valuestring, strlen(ref->valuestring));
  int nmsgs = cJSON_GetArraySize(req->messages), ncalls = 0;
  const cJSON *tool = cJSON_GetObjectItem(turn, "tool"), *c;
  if (tool) emit_call(st, req, ncalls++, nmsgs, turn);
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(turn, "tools")) emit_call(st, req, ncalls++, nmsgs, c);
  const cJSON *fin = cJSON_GetObjectItem(turn, "finish");
  if (ref) {
    llm__finish(st, LLM_FINISH_REFUSAL);
    llm__stop_reason(st, "refusal");
  } else if (fin && !strcmp(fin->valuestring, "length")) {
    llm__finish(st, LLM_FINISH_LENGTH);
    llm__stop_reason(st, "length");
  } else if (ncalls) {
    llm__finish(st, LLM_FINISH_TOOLS);
    llm__stop_reason(st, "tool_calls");
  } else {
    llm__finish(st, LLM_FINISH_STOP);
    llm__stop_reason(st, "stop");
  }
  llm__usage(st, (request_bytes(req) + 3) / 4, (out_bytes + 3) / 4);
  if ((rc = llm__stream_error(st, e))) goto out; /* a cap crossed on the way */
  llm__done(st);
out:
  cJSON_Delete(owned);
  return rc;
}

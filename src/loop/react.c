/* react.c - see react.h. */
#include "react.h"
#include "codemode.h"
#include "security.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "events.h"
#include "react_events.h"
#include "json.h"
#include "skills.h"
#include "skills_tools.h"
#include "util.h"

/* ------------------------------------------------------------------ */
/* Composition                                                         */

int react_mode_parse(const char *s, enum react_mode *out) {
  if (s && !strcmp(s, "lua")) *out = REACT_MODE_LUA;
  else if (s && !strcmp(s, "tools")) *out = REACT_MODE_TOOLS;
  else return ERR_INVALID;
  return 0;
}

bool react_tool_matches(const char *pattern, const char *name) {
  return !strcmp(pattern, name) || !fnmatch(pattern, name, 0);
}

/* Read on every run, never cached: a cache keyed by what stat(2) says
 * misses edits that leave it unchanged (a write through a shared mapping,
 * NFS's attribute cache), and a chat's next turn must see the prompt as
 * the file holds it now (red team 12, F1); the read is ~25k instructions
 * of a run's millions. */
char *react_system_prompt(const struct runtime *rt) {
  char path[4200];
  char *text = NULL;
  size_t len;
  struct err e = {0};
  const char *env = getenv("LUAGENT_SYSTEM_PROMPT");
  if (env && *env && !util_read_file(env, 1 << 20, &text, &len, &e)) return text;
  const char *cfgp = rt && rt->cfg ? config_string(rt->cfg, "system_prompt", NULL) : NULL;
  if (cfgp && *cfgp) { /* a workspace file, else the prompt text itself */
    snprintf(path, sizeof path, "%s/%s", rt->workspace, cfgp);
    if (!strstr(cfgp, "..") && !util_read_file(path, 1 << 20, &text, &len, &e)) return text;
    return xstrdup(cfgp);
  }
  if (rt && rt->workspace) {
    snprintf(path, sizeof path, "%s/system_prompt.md", rt->workspace);
    if (!util_read_file(path, 1 << 20, &text, &len, &e)) return text;
  }
  if (!util_data_path("system_prompt.md", path, sizeof path) &&
      !util_read_file(path, 1 << 20, &text, &len, &e))
    return text;
  return xstrdup(""); /* no prompt file: the model gets only the skills and tools */
}

struct run {
  struct call_ctx *ctx; /* the caller's context */
  struct call_ctx mctx; /* tool calls the model makes: caller kind model */
  struct llm_client *llm;
  const struct react_opts *o;
  struct budget budget;
  cJSON *messages;
  bool own_messages;
  cJSON *tools; /* offered: [{name, description, parameters}] */
  char *system;
  struct react_result *res;
  char **round_sigs; /* loop detection: one signature per tool round */
  cJSON *skills;     /* names of the selected skills */
  size_t nrounds;
  bool code;          /* code mode: r->tools holds only the lua tool */
  struct codemode cm; /* its limits and scope */
  struct llm_body_cache *bodies; /* what the next request can reuse (llm.h) */
  bool own_bodies;
  /* The loop's word on bodies (llm.h, llm_body_stamp): taken anew at every
   * change to r->messages or r->tools other than a message appended at
   * the end (a new run, compaction, a tool offered); the loop only ever
   * appends otherwise. Under one stamp the body cache reuses, unchecked,
   * even the last request's open wire message (its tool results), so a
   * message already sent (a tool result too) is never edited in place
   * without a new stamp. */
  unsigned long stamp;
  struct sbuf evb; /* the text of the loop's frequent events (react_events.h) */
};

/* A string member under key, a string literal: the key is not copied
 * (cJSON_AddItemToObjectCS), as the loop builds a few for every message
 * and event. Like cJSON_AddStringToObject, a NULL s adds nothing. */
static void add_str(cJSON *o, const char *key, const char *s) {
  cJSON_AddItemToObjectCS(o, key, cJSON_CreateString(s));
}

/* Like add_str, but the member takes *s (malloc'd, NUL-terminated) instead
 * of a copy of it, and *s is left NULL: a string the loop would otherwise
 * copy into a message and free right after (a tool's result, a call's id
 * and name). The item is an ordinary string member, not a reference: no
 * cJSON hooks are set anywhere, so cJSON frees it with free(), and it can
 * be edited (cJSON_SetValuestring, redaction) like any other. A NULL *s
 * adds nothing, as add_str does. */
static void add_str_take(cJSON *o, const char *key, char **s) {
  if (!*s) return;
  cJSON *v = cJSON_CreateNull();
  if (!v) return; /* *s stays the caller's: freed with it */
  v->type = cJSON_String;
  v->valuestring = *s;
  *s = NULL;
  cJSON_AddItemToObjectCS(o, key, v);
}

static void emit(struct run *r, const char *type, cJSON *data) {
  events_emit(r->ctx->events, r->ctx->run_id, type, data);
  cJSON_Delete(data);
}

static void offer(struct run *r, const struct tool *t);

/* The one place where skill selection plugs in: which tools the model sees
 * and which skill text joins the system prompt. With tool_patterns (delegate,
 * ask --tools) exactly the matching tools are offered and no skill text is
 * added. Otherwise the workspace's skills (rt->skills, loaded by
 * skills_ensure) are selected for the message: the picked skills' prompts
 * join the system prompt, and host tools plus the picked skills' tools are
 * offered. Without a skill set, every registered tool is offered. */
static void react_compose(struct run *r) {
  const struct react_opts *o = r->o;
  struct runtime *rt = r->ctx->rt;
  struct sbuf sys = {0};
  char *base = o->system ? xstrdup(o->system) : react_system_prompt(rt);
  sbuf_puts(&sys, base);
  free(base);
  struct skill_pick *picks = NULL;
  size_t npicks = 0;
  bool use_skills = !o->tool_patterns && rt && rt->skills && o->message;
  r->skills = cJSON_CreateArray();
  if (use_skills) {
    size_t max = skillset_count(rt->skills) + 1;
    picks = xcalloc(max, sizeof *picks);
    int degraded = 0;
    struct err warn = {0};
    skills_select(rt->skills, o->message, picks, max, &npicks, &degraded, &warn);
    if (npicks) {
      if (sys.len) sbuf_puts(&sys, "\n\n");
      skills_prompt(picks, npicks, &sys);
    }
    for (size_t i = 0; i < npicks; i++)
      cJSON_AddItemToArray(r->skills, cJSON_CreateString(picks[i].skill->name));
  }
  r->system = sbuf_take(&sys);
  if (!r->system) r->system = xstrdup("");
  r->tools = cJSON_CreateArray();
  const struct tool_registry *reg = rt ? rt->tools : NULL;
  size_t n = reg ? toolreg_count(reg) : 0;
  for (size_t i = 0; i < n; i++) {
    const struct tool *t = toolreg_at(reg, i);
    /* a loop started inside a code-mode chunk (delegate) offers no more
     * than the chunk could reach */
    if (!call_ctx_may_reach(r->ctx, t->name)) continue;
    if (o->tool_patterns) {
      bool ok = false;
      const cJSON *p;
      cJSON_ArrayForEach(p, o->tool_patterns) {
        if (cJSON_IsString(p) && react_tool_matches(p->valuestring, t->name)) ok = true;
      }
      /* a tool list is exactly what the model may call: skills.find and
       * skills.load only when it names them ("skills.*"), and then they
       * stay inside it (skills_tools.h) */
      if (!ok) continue;
    } else if (use_skills && !skills_offers_tool(picks, npicks, t)) {
      continue;
    }
    offer(r, t);
  }
  free(picks);
}

/* Whether this run is in code mode: asked for, or the default of the
 * provider it starts on (the named one, else the first). */
static bool code_mode_wanted(const struct react_opts *o, const struct llm_client *llm) {
  if (o->mode != REACT_MODE_DEFAULT) return o->mode == REACT_MODE_LUA;
  for (size_t i = 0; i < llm_client_count(llm); i++) {
    const struct llm_provider *p = llm_client_provider(llm, i);
    if (!o->provider || !strcmp(p->name, o->provider)) return p->code_mode;
  }
  return false;
}

/* Code mode: the composed tools become the lua tool's API. Chunks get
 * delegate() when the patterns name it and, inside a chunk, the chunk
 * could call it itself. */
static int react_code_setup(struct run *r, struct err *e) {
  bool dlg = false;
  const cJSON *p;
  cJSON_ArrayForEach(p, r->o->tool_patterns) {
    if (cJSON_IsString(p) && !strcmp(p->valuestring, CODEMODE_DELEGATE)) dlg = true;
  }
  if (r->ctx->chunk && !r->ctx->chunk->delegate) dlg = false;
  struct sbuf sys = {0};
  sbuf_puts(&sys, r->system);
  int rc = codemode_setup(&r->cm, r->ctx->rt, &r->tools, dlg, &sys, e);
  free(r->system);
  r->system = sbuf_take(&sys);
  if (!r->system) r->system = xstrdup("");
  return rc;
}

static bool offered(struct run *r, const char *name) {
  const cJSON *t;
  cJSON_ArrayForEach(t, r->tools) {
    const char *n = cJSON_GetStringValue(cJSON_GetObjectItem(t, "name"));
    if (n && !strcmp(n, name)) return true;
  }
  return false;
}

/* The offered entry borrows the tool's name, description and parameter
 * schema (cJSON references: the registry's strings and members, not
 * copies made and freed every run).
 * The registry outlives every run on it and never edits a tool's params;
 * readers of r->tools (the wire bodies, the body cache, the context
 * estimate) only read, and see an object either way (they mask the
 * reference bit, as cJSON_IsObject does). */
static void offer(struct run *r, const struct tool *t) {
  cJSON *d = cJSON_CreateObject();
  /* the name and description too are the registry's, borrowed */
  cJSON_AddItemToObjectCS(d, "name", cJSON_CreateStringReference(t->name));
  cJSON_AddItemToObjectCS(d, "description",
                          cJSON_CreateStringReference(t->description ? t->description : ""));
  cJSON_AddItemToObjectCS(d, "parameters",
                        cJSON_IsObject(t->params) ? cJSON_CreateObjectReference(t->params->child)
                        : t->params               ? cJSON_Duplicate(t->params, 1)
                                                  : cJSON_CreateObject());
  cJSON_AddItemToArray(r->tools, d);
}

/* After a successful skills.load: the skill's tools are offered from the
 * next model call on. The result is only a request: the skill is looked
 * up again, and only its own tools that this loop's tool list allows are
 * added, so neither a rewritten result nor a skill outside the list can
 * widen what the model may call. Its prompt already went back as the
 * tool result. */
static void apply_load(struct run *r, const char *content) {
  struct runtime *rt = r->ctx->rt;
  if (!rt || !rt->skills) return;
  cJSON *res = cJSON_Parse(content);
  const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(res, "skill"));
  const struct skill *k = name ? skillset_find(rt->skills, name) : NULL;
  if (k && skills_skill_in_scope(r->o->tool_patterns, k)) {
    cJSON *d = cJSON_CreateObject();
    add_str(d, "skill", k->name);
    cJSON *added = cJSON_AddArrayToObject(d, "tools");
    for (size_t i = 0; k->tools[i]; i++) {
      const struct tool *t = toolreg_find(rt->tools, k->tools[i]);
      if (!t || !t->skill || strcmp(t->skill, k->name) ||
          !skills_in_scope(r->o->tool_patterns, t->name) ||
          !call_ctx_may_reach(r->ctx, t->name) || offered(r, t->name))
        continue;
      offer(r, t);
      r->stamp = llm_body_stamp(); /* the tools changed */
      cJSON_AddItemToArray(added, cJSON_CreateString(t->name));
    }
    bool known = false;
    const cJSON *it;
    cJSON_ArrayForEach(it, r->skills) known |= !strcmp(it->valuestring, k->name);
    if (!known) cJSON_AddItemToArray(r->skills, cJSON_CreateString(k->name));
    emit(r, "skill_loaded", d);
  }
  cJSON_Delete(res);
}

/* ------------------------------------------------------------------ */
/* Streaming callbacks -> events                                       */

/* The streamed pieces are the most frequent events: their text is printed
 * once from the piece (a stack copy when small, for its NUL) into the
 * run's buffer, and a tree is built only for a sink that wants one
 * (react_events.h). */
static char *piece_text(const char *s, size_t n, char *buf, size_t cap) {
  char *t = n < cap ? buf : xmalloc(n + 1);
  memcpy(t, s, n);
  t[n] = 0;
  return t;
}

static void cb_text(void *ud, const char *s, size_t n) {
  char buf[512];
  char *t = piece_text(s, n, buf, sizeof buf);
  struct run *r = ud;
  react_ev_text(r->ctx, &r->evb, t);
  if (t != buf) free(t);
}
static void cb_tool_start(void *ud, int index, const char *id, const char *name) {
  struct run *r = ud;
  react_ev_tool_start(r->ctx, &r->evb, index, id, name);
}
static void cb_tool_args(void *ud, int index, const char *s, size_t n) {
  char buf[512];
  char *t = piece_text(s, n, buf, sizeof buf);
  struct run *r = ud;
  react_ev_tool_args(r->ctx, &r->evb, index, t);
  if (t != buf) free(t);
}
static void cb_retry(void *ud, const char *provider, int attempt, double delay, const char *why) {
  cJSON *d = cJSON_CreateObject();
  add_str(d, "provider", provider);
  if (attempt > 0) {
    cJSON_AddNumberToObject(d, "attempt", attempt);
    cJSON_AddNumberToObject(d, "delay_s", delay);
  } else {
    cJSON_AddTrueToObject(d, "fallback");
  }
  add_str(d, "reason", why);
  emit(ud, "retry", d);
}

/* ------------------------------------------------------------------ */
/* Tool execution                                                      */

struct job {
  struct run *r;
  unsigned share; /* how many read-only jobs run in parallel with this one */
  const struct llm_tool_call *call;
  const struct tool *tool;  /* NULL for the lua tool (code mode) */
  bool readonly;            /* may run in a thread beside others */
  long inner_calls;         /* code mode: the chunk's tools.call calls */
  cJSON *args;   /* parsed arguments, NULL if they were not JSON */
  char *content; /* what goes back to the model */
  bool is_error;
  char code[32];
  double ms;
  pthread_t th;
  bool threaded;
};

/* Cuts s to at most max bytes on a UTF-8 boundary and adds a marker. */
static char *truncate_result(char *s, long max) {
  size_t n = strlen(s);
  if (max <= 0 || n <= (size_t)max) return s;
  size_t cut = (size_t)max;
  while (cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80) cut--;
  struct sbuf b = {0};
  sbuf_append(&b, s, cut);
  sbuf_printf(&b, "\n[truncated: %zu of %zu characters shown]", cut, n);
  free(s);
  return sbuf_take(&b);
}

static void job_exec(struct job *j, struct call_ctx *ctx) {
  double t0 = util_monotonic();
  if (!j->tool && j->r->code) { /* the lua tool: a chunk (codemode.h) */
    struct codemode_result cr;
    codemode_exec(&j->r->cm, ctx, ctx->budget, j->call->id, j->args, &cr);
    j->ms = (util_monotonic() - t0) * 1000;
    j->is_error = cr.is_error;
    snprintf(j->code, sizeof j->code, "%s", cr.code);
    j->inner_calls = cr.inner_calls;
    j->content = truncate_result(cr.content, j->r->o->limits.max_tool_result_chars);
    return;
  }
  cJSON *result = NULL;
  struct err e = {0};
  int rc = tool_call(ctx, j->call->name, j->args, &result, &e);
  j->ms = (util_monotonic() - t0) * 1000;
  if (rc) {
    j->is_error = true;
    snprintf(j->code, sizeof j->code, "%s", e.code[0] ? e.code : "tool_error");
    struct sbuf b = {0};
    sbuf_printf(&b, "error (%s): %s", j->code, e.msg);
    j->content = sbuf_take(&b);
  } else {
    j->content = result ? json_print(result, JSON_CANONICAL) : xstrdup("null"); /* stable bytes: provider caches hit */
  }
  cJSON_Delete(result);
  j->content = truncate_result(j->content, j->r->o->limits.max_tool_result_chars);
}

/* A worker thread shares the runtime, its store included: the store gives
 * each thread a connection of its own (store.h), kept for the next tool
 * thread when this one ends, so a parallel call opens nothing. */
static void *job_thread(void *p) {
  struct job *j = p;
  struct call_ctx c = j->r->mctx;
  c.share = j->share; /* one budget, split among the threads */
  job_exec(j, &c); /* c shares the run's taint flag (sec_after sets it) */
  return NULL;
}

/* Prepares a job: unknown or not offered tools and unparsable arguments
 * fail here, before anything runs. Returns true if the job should run. */
static bool job_prepare(struct job *j) {
  struct run *r = j->r;
  const char *name = j->call->name;
  if (!offered(r, name)) {
    struct sbuf b = {0};
    sbuf_printf(&b, "error (unknown_tool): there is no tool named '%s'; available:", name);
    const cJSON *t;
    int k = 0;
    cJSON_ArrayForEach(t, r->tools) {
      sbuf_printf(&b, "%s %s", k++ ? "," : "",
                  cJSON_GetStringValue(cJSON_GetObjectItem(t, "name")));
    }
    if (!k) sbuf_puts(&b, " (none)");
    j->content = sbuf_take(&b);
    j->is_error = true;
    snprintf(j->code, sizeof j->code, "unknown_tool");
    return false;
  }
  j->tool = toolreg_find(r->ctx->rt->tools, name);
  /* One object per call: a repeated key would let stages disagree on
   * which value counts, so it is refused here, naming the key. */
  struct err pe = {0};
  j->args = json_parse_str(j->call->arguments, JSON_NO_DUPLICATES, &pe);
  if (!cJSON_IsObject(j->args)) {
    cJSON_Delete(j->args);
    j->args = NULL;
    struct sbuf b = {0};
    sbuf_printf(&b, "error (invalid_args): the arguments for %s are not a JSON object", name);
    if (pe.rc) sbuf_printf(&b, " (%s)", pe.msg);
    sbuf_puts(&b, ": ");
    util_escape_text(&b, j->call->arguments, strlen(j->call->arguments), 200);
    j->content = sbuf_take(&b);
    j->is_error = true;
    snprintf(j->code, sizeof j->code, "invalid_args");
    return false;
  }
  j->readonly = j->tool ? j->tool->impact == IMPACT_READ : r->code && r->cm.readonly;
  return true;
}

static void emit_tool_result(struct run *r, struct job *j) {
  struct react_ev_result f = {.id = j->call->id,
                               .name = j->call->name,
                               .ok = !j->is_error,
                               .code = j->code,
                               .content = j->content,
                               .ms = (double)(long)(j->ms * 1000) / 1000,
                               .parallel = j->threaded};
  react_ev_tool_result(r->ctx, &r->evb, &f);
}

/* Runs the round's tool calls: read-only ones in parallel, the rest in
 * order after them. Results are appended to the messages in the order the
 * model asked. Returns 0, or ERR_LIMIT when the tool call budget ran out
 * (e filled), or ERR_STOPPED. *all_failed tells whether every call failed.
 * *sig gets the round's signature for loop detection. The calls' id and
 * name strings move into the tool messages (resp's are left NULL). */
static int run_tools(struct run *r, struct llm_response *resp, bool *all_failed, char **sig,
                     struct err *e) {
  size_t n = resp->ncalls;
  struct job *jobs = xcalloc(n, sizeof *jobs);
  bool *run = xcalloc(n, sizeof *run);
  int rc = 0;
  size_t admitted = 0;
  for (size_t i = 0; i < n; i++) {
    jobs[i].r = r;
    jobs[i].call = &resp->calls[i];
    if (budget_check_tool_call(&r->budget, e)) {
      rc = ERR_LIMIT;
      break;
    }
    budget_charge(&r->budget, 0, 0, 1, 0);
    r->res->tool_calls++;
    admitted++;
    run[i] = job_prepare(&jobs[i]);
  }
  if (rc) n = admitted;
  /* read-only tools in parallel */
  size_t nread = 0;
  for (size_t i = 0; i < n; i++)
    if (run[i] && jobs[i].readonly) nread++;
  bool parallel = r->o->limits.parallel_tools && nread > 1;
  for (size_t i = 0; i < n && parallel; i++) {
    if (!run[i] || !jobs[i].readonly) continue;
    jobs[i].share = (unsigned)nread;
    if (pthread_create(&jobs[i].th, NULL, job_thread, &jobs[i]) == 0) {
      jobs[i].threaded = true;
      run[i] = false;
    }
  }
  for (size_t i = 0; i < n; i++)
    if (jobs[i].threaded) pthread_join(jobs[i].th, NULL);
  /* everything else in order */
  for (size_t i = 0; i < n; i++) {
    if (!run[i]) continue;
    if (r->ctx->stop && *r->ctx->stop) {
      jobs[i].content = xstrdup("error (stopped): the operator stopped the run");
      jobs[i].is_error = true;
      snprintf(jobs[i].code, sizeof jobs[i].code, "stopped");
      continue;
    }
    job_exec(&jobs[i], &r->mctx);
  }
  *all_failed = n > 0;
  struct sbuf s = {0};
  for (size_t i = 0; i < n; i++) {
    struct job *j = &jobs[i];
    if (!j->is_error) *all_failed = false;
    r->res->tool_calls += j->inner_calls; /* a chunk's calls are the run's too */
    emit_tool_result(r, j);
    if (!j->is_error && !strcmp(j->call->name, SKILLS_LOAD)) apply_load(r, j->content);
    /* signature: name, canonical arguments, result */
    char *canon = j->args ? json_canonical(j->args) : xstrdup(j->call->arguments);
    /* name \x1f canon \x1f content \x1e, as "%s" wrote it (NULL: "(null)") */
    sbuf_puts(&s, j->call->name ? j->call->name : "(null)");
    sbuf_append(&s, "\x1f", 1);
    sbuf_puts(&s, canon ? canon : "(null)");
    sbuf_append(&s, "\x1f", 1);
    sbuf_puts(&s, j->content ? j->content : "(null)");
    sbuf_append(&s, "\x1e", 1);
    free(canon);
    cJSON_Delete(j->args);
    /* The tool message takes the result and the call's id and name rather
     * than copies: the response is freed right after this round (the
     * assistant message holds its own copies of the id and name). */
    struct llm_tool_call *call = &resp->calls[i];
    cJSON *m = cJSON_CreateObject();
    add_str(m, "role", "tool");
    add_str_take(m, "tool_call_id", &call->id);
    add_str_take(m, "name", &call->name);
    add_str_take(m, "content", &j->content);
    if (j->is_error) cJSON_AddTrueToObject(m, "is_error");
    cJSON_AddItemToArray(r->messages, m);
    free(j->content); /* NULL unless the member could not be made */
    j->call = NULL;   /* its id and name are the message's now */
  }
  /* calls past the tool budget still need an answer for the transcript */
  for (size_t i = n; i < resp->ncalls; i++) {
    cJSON *m = cJSON_CreateObject();
    add_str(m, "role", "tool");
    add_str_take(m, "tool_call_id", &resp->calls[i].id);
    add_str_take(m, "name", &resp->calls[i].name);
    add_str(m, "content", "error (budget_exceeded): not run, tool call limit");
    cJSON_AddTrueToObject(m, "is_error");
    cJSON_AddItemToArray(r->messages, m);
  }
  *sig = sbuf_take(&s);
  free(jobs);
  free(run);
  if (!rc && r->ctx->stop && *r->ctx->stop)
    rc = err_set(e, ERR_STOPPED, "stopped", "the operator stopped the run");
  return rc;
}

/* Loop detection: the same round again (same tools, same arguments, same
 * results), or A-B-A-B. */
static bool repeats(struct run *r, const char *sig) {
  size_t n = r->nrounds;
  if (n >= 1 && !strcmp(r->round_sigs[n - 1], sig)) return true;
  if (n >= 3 && !strcmp(r->round_sigs[n - 2], sig) &&
      !strcmp(r->round_sigs[n - 1], r->round_sigs[n - 3]))
    return true;
  return false;
}

static void add_note(struct run *r, const char *text) {
  cJSON *m = cJSON_CreateObject();
  add_str(m, "role", "user");
  add_str(m, "content", text);
  cJSON_AddItemToArray(r->messages, m);
  cJSON *d = cJSON_CreateObject();
  add_str(d, "text", text);
  emit(r, "note", d);
}

/* ------------------------------------------------------------------ */
/* The loop                                                            */

void react_result_free(struct react_result *r) {
  if (!r) return;
  free(r->answer);
  r->answer = NULL;
}

static const char NOTE_LOOP[] =
    "[luagent] You called the same tools with the same arguments again and got the same "
    "results. Do not repeat calls: use the results you have, try something different, or "
    "answer.";
static const char NOTE_FINAL_LOOP[] =
    "[luagent] The tool calls are going in circles, so tools are now off. Answer with what "
    "you have, and say what is missing.";
static const char NOTE_EXPLAIN[] =
    "[luagent] Every tool call in the previous round failed and this is the last round: tools "
    "are off. Explain to the user what you tried, why it failed, and what they could do.";

int react_run(struct call_ctx *ctx, struct llm_client *llm, const struct react_opts *o,
              struct react_result *out, struct err *e) {
  memset(out, 0, sizeof *out);
  struct run r = {.ctx = ctx, .llm = llm, .o = o, .res = out};
  r.mctx = *ctx;
  r.mctx.caller.kind = CALLER_MODEL;
  /* The model's calls are named after the agent (delegate's opts.agent),
   * never after whatever started the loop: a script or skill named like an
   * agent must not earn that agent's rules, nor dodge them. */
  snprintf(r.mctx.caller.name, sizeof r.mctx.caller.name, "%s", o->agent ? o->agent : "");
  r.mctx.run = call_ctx_run(ctx); /* one run state for the whole run */
  r.mctx.tool_scope = o->tool_patterns; /* skills.find/load stay inside it */
  r.mctx.run_provider = o->provider;    /* the run's identity (call.h) */
  r.mctx.run_system = o->system;
  if (o->context_tainted) call_ctx_taint(&r.mctx); /* memories a tainted run wrote */
  budget_init(&r.budget, &o->limits, ctx->budget);
  r.mctx.budget = &r.budget;
  /* Sandboxes the model's calls create (skill tools) never outlive the run. */
  double run_deadline = budget_deadline(&r.budget);
  if (run_deadline > 0 &&
      (r.mctx.limits.deadline_at <= 0 || run_deadline < r.mctx.limits.deadline_at))
    r.mctx.limits.deadline_at = run_deadline;
  r.messages = o->messages;
  if (!r.messages) {
    r.messages = cJSON_CreateArray();
    r.own_messages = true;
  }
  react_compose(&r);
  r.bodies = o->body_cache;
  if (!r.bodies) {
    r.bodies = llm_body_cache_new();
    r.own_bodies = true;
  }
  r.code = code_mode_wanted(o, llm);
  int setup_rc = r.code ? react_code_setup(&r, e) : 0;
  if (o->context && *o->context) { /* operator control: relevant memories */
    struct sbuf sys = {0};
    sbuf_puts(&sys, r.system);
    if (r.system[0]) sbuf_puts(&sys, "\n\n");
    sbuf_puts(&sys, o->context);
    free(r.system);
    r.system = sbuf_take(&sys);
  }
  if (o->message) {
    cJSON *m = cJSON_CreateObject();
    add_str(m, "role", "user");
    add_str(m, "content", o->message);
    cJSON_AddItemToArray(r.messages, m);
  }
  {
    cJSON *d = cJSON_CreateObject();
    add_str(d, "kind", o->kind ? o->kind : "ask");
    if (o->name) add_str(d, "name", o->name);
    if (o->parent_run_id) add_str(d, "parent", o->parent_run_id);
    add_str(d, "caller", caller_kind_name(ctx->caller.kind));
    if (o->message) add_str(d, "message", o->message);
    /* the event's tree lives only through emit() and sinks get it const:
     * the skill and tool names are referenced, not copied */
    cJSON_AddItemToObjectCS(d, "skills", cJSON_CreateArrayReference(r.skills ? r.skills->child : NULL));
    cJSON *names = cJSON_AddArrayToObject(d, "tools");
    const cJSON *t;
    cJSON_ArrayForEach(t, r.tools) {
      const char *nm = cJSON_GetStringValue(cJSON_GetObjectItem(t, "name"));
      if (nm) cJSON_AddItemToArray(names, cJSON_CreateStringReference(nm));
    }
    if (r.code) {
      add_str(d, "mode", "lua");
      cJSON *reach = cJSON_AddArrayToObject(d, "lua_tools");
      for (char **p = r.cm.names; p && *p; p++) cJSON_AddItemToArray(reach, cJSON_CreateString(*p));
      if (r.cm.delegate) cJSON_AddTrueToObject(d, "lua_delegate");
    }
    emit(&r, "run_start", d);
  }

  struct llm_callbacks cb = {cb_text, cb_tool_start, cb_tool_args, cb_retry, &r};
  /* the caller's messages (a chat's) may have changed since its last run */
  r.stamp = llm_body_stamp();
  int rc = setup_rc;
  bool prev_all_failed = false;
  int loop_strikes = 0; /* 1: noted; 2: final round without tools */
  bool final_round = false;
  int reflect_retries = 0;
  struct sbuf answer = {0};
  sbuf_puts(&answer, "");
  struct sbuf paused = {0}; /* text of pause_turn turns, the start of the answer */
  sbuf_puts(&paused, "");
  snprintf(out->status, sizeof out->status, "ok");
  for (; !rc;) {
    if (ctx->stop && *ctx->stop) {
      rc = err_set(e, ERR_STOPPED, "stopped", "the operator stopped the run");
      break;
    }
    /* operator control: steer lines, then compaction (react.h hooks) */
    if (o->steer) {
      struct sbuf st = {0};
      if (o->steer(o->steer_ud, &st) > 0 && st.s) {
        cJSON *m = cJSON_CreateObject();
        add_str(m, "role", "user");
        add_str(m, "content", st.s);
        cJSON_AddItemToArray(r.messages, m);
        cJSON *d = cJSON_CreateObject();
        add_str(d, "text", st.s);
        emit(&r, "steer", d);
      }
      sbuf_free(&st);
    }
    if (o->compact && o->compact(o->compact_ud, &r.mctx, &r.budget, r.system, r.tools, r.messages))
      r.stamp = llm_body_stamp();
    if ((rc = budget_check_model_call(&r.budget, e))) break;
    /* the last iteration after a round where every tool failed: explain */
    if (!final_round && prev_all_failed && r.budget.max_iterations > 0 &&
        r.budget.iterations + 1 >= r.budget.max_iterations) {
      add_note(&r, NOTE_EXPLAIN);
      final_round = true;
    }
    struct llm_request req = {
        .system = r.system,
        .messages = r.messages,
        .tools = r.tools,
        .no_tools = final_round,
        .provider = o->provider,
        .deadline_at = budget_deadline(&r.budget),
        .stop = ctx->stop,
        .timeout_s = o->limits.call_timeout_s,
        .max_answer_bytes = (size_t)o->limits.max_answer_bytes,
        .max_tool_args_bytes = (size_t)o->limits.max_tool_args_bytes,
        .body_cache = r.bodies,
        .stamp = r.stamp,
    };
    struct llm_response resp;
    struct err le = {0};
    int lrc = llm_complete(llm, &req, &cb, &resp, &le);
    budget_charge(&r.budget, 1, 1, 0, resp.input_tokens + resp.output_tokens);
    out->iterations++;
    out->model_calls++;
    out->input_tokens += resp.input_tokens;
    out->output_tokens += resp.output_tokens;
    out->cache_read_tokens += resp.cache_read_tokens;
    out->cache_write_tokens += resp.cache_write_tokens;
    {
      /* cached prompt tokens, as the provider counts them (Anthropic's
       * input_tokens exclude them, OpenAI's prompt_tokens include them) */
      struct react_ev_usage u = {.provider = resp.provider,
                                 .input_tokens = (double)resp.input_tokens,
                                 .output_tokens = (double)resp.output_tokens,
                                 .cache_read = (double)resp.cache_read_tokens,
                                 .cache_write = (double)resp.cache_write_tokens,
                                 .attempts = resp.attempts};
      react_ev_usage(r.ctx, &r.evb, &u);
    }
    /* A provider-side tool (web search, web fetch, code execution) brought
     * outside content into this answer: the run is tainted as if a local
     * open_world tool had. */
    for (const cJSON *b = resp.blocks ? resp.blocks->child : NULL; b; b = b->next) {
      const char *bt = cJSON_GetStringValue(cJSON_GetObjectItem(b, "type"));
      size_t bl = bt ? strlen(bt) : 0;
      if (bl > 12 && !strcmp(bt + bl - 12, "_tool_result")) call_ctx_taint(&r.mctx);
    }
    if (resp.invalid_utf8 > 0) { /* the text is kept; the fact goes on record */
      cJSON *d = cJSON_CreateObject();
      cJSON_AddNumberToObject(d, "invalid_utf8_bytes", (double)resp.invalid_utf8);
      add_str(d, "text",
                              "the provider sent invalid UTF-8; each bad byte is shown as U+FFFD");
      emit(&r, "note", d);
    }
    if (resp.thinking || resp.redacted_thinking) { /* for the journal, never the answer */
      cJSON *d = cJSON_CreateObject();
      add_str(d, "text", resp.thinking ? resp.thinking : "");
      if (resp.redacted_thinking)
        cJSON_AddNumberToObject(d, "redacted_blocks", resp.redacted_thinking);
      emit(&r, "thinking", d);
    }
    if (lrc) {
      answer.len = 0;
      sbuf_puts(&answer, paused.s);
      sbuf_puts(&answer, resp.text ? resp.text : ""); /* keep partial output */
      *e = le;
      rc = lrc;
      llm_response_free(&resp);
      break;
    }
    if (resp.finish == LLM_FINISH_REFUSAL) {
      /* A refusal is its own outcome. The refused turn stays out of the
       * conversation: Anthropic asks for it to be removed before going on,
       * and a chat resumed with it would only be refused again. */
      answer.len = 0;
      sbuf_puts(&answer, paused.s);
      sbuf_puts(&answer, resp.text);
      cJSON *d = cJSON_CreateObject();
      add_str(d, "text", resp.refusal ? resp.refusal : "");
      add_str(d, "stop_reason", resp.stop_reason);
      add_str(d, "provider", resp.provider);
      emit(&r, "refusal", d);
      rc = err_set(e, ERR_FAIL, "refused", "the model refused to answer: %s",
                   resp.refusal && *resp.refusal ? resp.refusal : "(it gave no reason)");
      llm_response_free(&resp);
      break;
    }
    /* the assistant turn, as the model sent it */
    cJSON *am = cJSON_CreateObject();
    add_str(am, "role", "assistant");
    add_str(am, "content", resp.text);
    /* Anthropic: the content blocks go back unchanged on the next request
     * (thinking and its signature, server tool blocks, citations); moved
     * from the response, which is done with them */
    if (resp.blocks) {
      cJSON_AddItemToObjectCS(am, "anthropic_content", resp.blocks);
      resp.blocks = NULL;
    }
    size_t ncalls = final_round ? 0 : resp.ncalls;
    if (ncalls) {
      cJSON *tc = cJSON_AddArrayToObject(am, "tool_calls");
      for (size_t i = 0; i < ncalls; i++) {
        cJSON *c = cJSON_CreateObject();
        add_str(c, "id", resp.calls[i].id);
        add_str(c, "name", resp.calls[i].name);
        add_str(c, "arguments", resp.calls[i].arguments);
        cJSON_AddItemToArray(tc, c);
      }
    }
    cJSON_AddItemToArray(r.messages, am);
    react_ev_turn(r.ctx, &r.evb, out->iterations, (double)ncalls, resp.stop_reason);
    if (ncalls == 0 && resp.finish == LLM_FINISH_PAUSE) {
      /* pause_turn: the provider paused a long turn (server tools); the
       * turn just kept is sent back as it is and the model continues it */
      sbuf_puts(&paused, resp.text);
      llm_response_free(&resp);
      continue;
    }
    if (ncalls == 0 && resp.finish == LLM_FINISH_LENGTH) {
      /* half an answer is not an answer: say so, keep what came */
      answer.len = 0;
      sbuf_puts(&answer, paused.s);
      sbuf_puts(&answer, resp.text);
      rc = err_set(e, ERR_LIMIT, "truncated",
                   "the answer was cut off at the model's output limit (stop reason %s from %s); "
                   "raise max_tokens in the provider's settings",
                   resp.stop_reason, resp.provider);
      llm_response_free(&resp);
      break;
    }
    if (ncalls == 0 && o->reflect && !final_round && resp.text[0] && !(ctx->stop && *ctx->stop)) {
      struct sbuf fb = {0};
      int again = o->reflect(o->reflect_ud, &r.mctx, &r.budget, r.messages, resp.text,
                             reflect_retries, &fb);
      struct err be = {0};
      if (again > 0 && fb.s && !budget_check_model_call(&r.budget, &be)) {
        /* reflexion: the reviewer's note, then another round (only when the
         * budget has room for it; else the candidate answer stands) */
        reflect_retries++;
        add_note(&r, fb.s);
        sbuf_free(&fb);
        llm_response_free(&resp);
        continue;
      }
      sbuf_free(&fb);
    }
    if (ncalls == 0) {
      answer.len = 0;
      sbuf_puts(&answer, paused.s);
      sbuf_puts(&answer, resp.text);
      if (final_round && resp.ncalls > 0 && !resp.text[0]) {
        rc = err_set(e, ERR_FAIL, loop_strikes >= 2 ? "loop_detected" : "tool_error",
                     "the model kept calling tools in the final round without tools");
      }
      llm_response_free(&resp);
      break;
    }
    bool all_failed = false;
    char *sig = NULL;
    rc = run_tools(&r, &resp, &all_failed, &sig, e);
    llm_response_free(&resp);
    if (rc) {
      free(sig);
      break;
    }
    prev_all_failed = all_failed;
    if (repeats(&r, sig)) {
      loop_strikes++;
      if (loop_strikes == 1) {
        add_note(&r, NOTE_LOOP);
      } else {
        add_note(&r, NOTE_FINAL_LOOP);
        final_round = true;
      }
    }
    r.round_sigs = xrealloc(r.round_sigs, (r.nrounds + 1) * sizeof *r.round_sigs);
    r.round_sigs[r.nrounds++] = sig;
  }
  if (rc == ERR_STOPPED && answer.len == 0) { /* stopped mid-tool: keep what the model said */
    const cJSON *last = cJSON_GetArrayItem(r.messages, cJSON_GetArraySize(r.messages) - 1);
    for (const cJSON *m = last; m; m = m == r.messages->child ? NULL : m->prev) {
      const char *role = cJSON_GetStringValue(cJSON_GetObjectItem(m, "role"));
      if (role && !strcmp(role, "user")) break;
      const char *c = cJSON_GetStringValue(cJSON_GetObjectItem(m, "content"));
      if (role && !strcmp(role, "assistant") && c && *c) {
        sbuf_puts(&answer, c);
        break;
      }
    }
  }
  sbuf_free(&paused);
  out->answer = sbuf_take(&answer);
  if (rc) {
    const char *st = "failed";
    if (rc == ERR_STOPPED)
      st = "stopped";
    else if (!strcmp(e->code, "budget_exceeded"))
      st = "limit";
    else if (!strcmp(e->code, "loop_detected"))
      st = "loop";
    else if (!strcmp(e->code, "refused"))
      st = "refused";
    else if (!strcmp(e->code, "truncated"))
      st = "truncated";
    snprintf(out->status, sizeof out->status, "%s", st);
    out->err = *e;
    cJSON *d = cJSON_CreateObject();
    add_str(d, "code", e->code);
    add_str(d, "message", e->msg);
    emit(&r, "error", d);
  } else if (loop_strikes >= 2) {
    snprintf(out->status, sizeof out->status, "ok");
  }
  {
    cJSON *d = cJSON_CreateObject();
    add_str(d, "status", out->status);
    add_str(d, "answer", out->answer);
    if (rc) {
      add_str(d, "code", e->code);
      add_str(d, "error", e->msg);
    }
    cJSON_AddNumberToObject(d, "iterations", out->iterations);
    cJSON_AddNumberToObject(d, "model_calls", (double)out->model_calls);
    cJSON_AddNumberToObject(d, "tool_calls", (double)out->tool_calls);
    cJSON_AddNumberToObject(d, "input_tokens", (double)out->input_tokens);
    cJSON_AddNumberToObject(d, "output_tokens", (double)out->output_tokens);
    if (out->cache_read_tokens || out->cache_write_tokens) {
      cJSON_AddNumberToObject(d, "cache_read_input_tokens", (double)out->cache_read_tokens);
      cJSON_AddNumberToObject(d, "cache_creation_input_tokens", (double)out->cache_write_tokens);
    }
    if (loop_strikes) cJSON_AddNumberToObject(d, "loop_strikes", loop_strikes);
    emit(&r, "run_end", d);
  }
  for (size_t i = 0; i < r.nrounds; i++) free(r.round_sigs[i]);
  free(r.round_sigs);
  if (r.own_messages) cJSON_Delete(r.messages);
  cJSON_Delete(r.tools);
  codemode_free(&r.cm);
  if (r.own_bodies) llm_body_cache_free(r.bodies);
  cJSON_Delete(r.skills);
  free(r.system);
  sbuf_free(&r.evb);
  budget_destroy(&r.budget);
  return rc;
}

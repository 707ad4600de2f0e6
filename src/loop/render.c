/* render.c - see render.h. */
#include "render.h"

#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "util.h"

/* Model text goes to a terminal: keep newlines and tabs, make every other
 * control character visible, so output cannot drive the terminal. */
static void put_text(struct render *r, FILE *f, const char *s) {
  size_t len = strlen(s);
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    char esc[16] = "";
    size_t k = c == '\n' || c == '\t' ? 1 : util_term_escape(s + i, len - i, esc);
    if (esc[0]) fputs(esc, f);
    else fwrite(s + i, 1, k, f);
    i += k - 1;
    if (f == r->out) r->at_line_start = c == '\n';
  }
}

static void put_escaped(FILE *f, const char *s, size_t max) {
  struct sbuf b = {0};
  util_escape_text(&b, s, strlen(s), max);
  if (b.s) fputs(b.s, f);
  sbuf_free(&b);
}

/* A name a model may have chosen (a tool it asked for, an agent): escaped
 * like its text, so "\r\x1b[2K<- ok" in a tool name cannot rewrite the
 * operator's screen. */
static void put_name(FILE *f, const char *s) { put_escaped(f, s, 160); }

static const char *str(const cJSON *d, const char *k) {
  const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(d, k));
  return s ? s : "";
}

static void newline_if_needed(struct render *r) {
  if (!r->at_line_start) {
    fputc('\n', r->out);
    r->at_line_start = 1;
  }
  fflush(r->out);
}

void render_event(struct render *r, const char *run_id, const char *type, const cJSON *data) {
  if (r->json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "run_id", run_id ? run_id : "");
    cJSON_AddStringToObject(o, "type", type);
    cJSON_AddItemToObject(o, "data", data ? cJSON_Duplicate(data, 1) : cJSON_CreateNull());
    char *s = json_print(o, 0);
    fputs(s, r->out);
    fputc('\n', r->out);
    fflush(r->out);
    free(s);
    cJSON_Delete(o);
    return;
  }
  if (!r->top_run[0] && run_id) snprintf(r->top_run, sizeof r->top_run, "%s", run_id);
  int nested = run_id && strcmp(run_id, r->top_run) != 0;
  FILE *info = r->info;
  const char *ind = nested ? "  [delegate] " : "";
  if (!strcmp(type, "text_delta")) {
    if (nested) return; /* a delegate's text is its caller's business */
    put_text(r, r->out, str(data, "text"));
    fflush(r->out);
  } else if (!strcmp(type, "tool_call_start")) {
    if (!nested) newline_if_needed(r);
    fprintf(info, "%s-> ", ind);
    put_name(info, str(data, "name"));
    fputc('\n', info);
    fflush(info);
  } else if (!strcmp(type, "tool_result")) {
    const cJSON *ok = cJSON_GetObjectItem(data, "ok");
    const cJSON *ms = cJSON_GetObjectItem(data, "ms");
    if (cJSON_IsTrue(ok)) {
      fprintf(info, "%s<- ", ind);
      put_name(info, str(data, "name"));
      fprintf(info, " ok (%.1f ms%s): ", cJSON_IsNumber(ms) ? ms->valuedouble : 0,
              cJSON_IsTrue(cJSON_GetObjectItem(data, "parallel")) ? ", parallel" : "");
    } else {
      fprintf(info, "%s<- ", ind);
      put_name(info, str(data, "name"));
      fputs(" failed: ", info);
    }
    put_escaped(info, str(data, "content"), 200);
    fputc('\n', info);
    fflush(info);
  } else if (!strcmp(type, "lua_code")) {
    /* code mode: the chunk, each line indented under its lua call */
    const char *code = str(data, "code");
    struct sbuf b = {0};
    util_escape_output(&b, code, strlen(code), 4000);
    const char *p = b.s ? b.s : "";
    for (int line = 1; *p; line++) {
      size_t n = strcspn(p, "\n");
      fprintf(info, "%s   %3d | %.*s\n", ind, line, (int)n, p);
      p += n + (p[n] == '\n');
    }
    sbuf_free(&b);
    fflush(info);
  } else if (!strcmp(type, "lua_call")) {
    const cJSON *ok = cJSON_GetObjectItem(data, "ok");
    char *args = json_print(cJSON_GetObjectItem(data, "args"), JSON_CANONICAL);
    fprintf(info, "%s   -> ", ind);
    put_name(info, str(data, "name"));
    fputc(' ', info);
    put_escaped(info, args ? args : "", 120);
    if (cJSON_IsTrue(ok)) {
      fputs(" ok: ", info);
    } else {
      fputs(" failed (", info);
      put_name(info, str(data, "code")); /* a chunk may raise any code it likes */
      fputs("): ", info);
    }
    put_escaped(info, str(data, "content"), 200);
    fputc('\n', info);
    free(args);
    fflush(info);
  } else if (!strcmp(type, "retry")) {
    if (cJSON_IsTrue(cJSON_GetObjectItem(data, "fallback"))) {
      fprintf(info, "%s[provider %s failed, trying the next one] ", ind, str(data, "provider"));
    } else {
      const cJSON *a = cJSON_GetObjectItem(data, "attempt");
      const cJSON *d = cJSON_GetObjectItem(data, "delay_s");
      fprintf(info, "%s[retry %d on %s in %.2fs] ", ind, cJSON_IsNumber(a) ? a->valueint : 0,
              str(data, "provider"), cJSON_IsNumber(d) ? d->valuedouble : 0);
    }
    put_escaped(info, str(data, "reason"), 300);
    fputc('\n', info);
    fflush(info);
  } else if (!strcmp(type, "note")) {
    newline_if_needed(r);
    fprintf(info, "%s[note] ", ind);
    put_escaped(info, str(data, "text"), 400);
    fputc('\n', info);
  } else if (!strcmp(type, "approval_requested")) {
    newline_if_needed(r);
    fprintf(info, "%s[approval needed] ", ind);
    put_name(info, str(data, "tool"));
    fprintf(info, " (impact %s): ", str(data, "impact"));
    put_escaped(info, str(data, "reason"), 300);
    fputc('\n', info);
    fflush(info);
  } else if (!strcmp(type, "approval_queued")) {
    const cJSON *id = cJSON_GetObjectItem(data, "id");
    long long n = cJSON_IsNumber(id) ? (long long)id->valuedouble : 0;
    char ws[300] = "";
    if (r->workspace && strcmp(r->workspace, ".")) {
      struct sbuf b = {0};
      util_escape_text(&b, r->workspace, strlen(r->workspace), 200);
      snprintf(ws, sizeof ws, " --workspace %s", b.s ? b.s : "");
      sbuf_free(&b);
    }
    fprintf(info,
            "%s[approval] request %lld waits in the queue; decide it with\n"
            "%s  luagent%s approvals approve %lld    or    luagent%s approvals deny %lld\n",
            ind, n, ind, ws, n, ws, n);
    fflush(info);
  } else if (!strcmp(type, "approval_decided")) {
    fprintf(info, "%s[approval] ", ind);
    put_name(info, str(data, "tool"));
    fprintf(info, " %s by ", str(data, "verdict"));
    put_name(info, str(data, "by"));
    if (*str(data, "reason")) {
      fputs(": ", info);
      put_escaped(info, str(data, "reason"), 300);
    }
    fputc('\n', info);
    fflush(info);
  } else if (!strcmp(type, "steer") || !strcmp(type, "compaction") ||
             !strcmp(type, "reflexion")) {
    char *s = json_print(data, 0);
    fprintf(info, "%s[%s] ", ind, type);
    put_escaped(info, s, 400);
    fputc('\n', info);
    free(s);
  } else if (!strcmp(type, "run_start") && nested) {
    fprintf(info, "%s%s started\n", ind, str(data, "kind"));
  } else if (!strcmp(type, "run_end")) {
    if (nested) {
      fprintf(info, "%s%s\n", ind, str(data, "status"));
    } else {
      newline_if_needed(r);
    }
  } else if (!strcmp(type, "print")) {
    put_text(r, r->out, str(data, "text"));
  } else if (!strcmp(type, "log")) {
    newline_if_needed(r);
    fprintf(info, "%s[%s] ", ind, str(data, "level"));
    put_escaped(info, str(data, "text"), 2000);
    fputc('\n', info);
  } else if (!strcmp(type, "script_tool_call") && r->replay) {
    newline_if_needed(r);
    const cJSON *args = cJSON_GetObjectItem(data, "args");
    char *a = args ? json_print(args, 0) : NULL;
    fprintf(info, "%s[tool] ", ind);
    put_name(info, str(data, "tool"));
    fputc(' ', info);
    put_escaped(info, a ? a : str(data, "args_text"), 200);
    fprintf(info, " by %s ", str(data, "caller"));
    put_name(info, str(data, "caller_name"));
    fputs(": ", info);
    free(a);
    const cJSON *ms = cJSON_GetObjectItem(data, "ms");
    if (cJSON_IsTrue(cJSON_GetObjectItem(data, "ok"))) {
      fprintf(info, "ok (%.1f ms)\n", cJSON_IsNumber(ms) ? ms->valuedouble : 0);
    } else {
      put_name(info, str(data, "code"));
      fputs(": ", info);
      put_escaped(info, str(data, "error"), 300);
      fputc('\n', info);
    }
  }
  /* usage, turn_complete, tool_args_delta, error, run_start: not shown
   * (the command prints the final error itself) */
}

static void render_emit(void *ud, const char *run_id, const char *type, const cJSON *data) {
  render_event(ud, run_id, type, data);
}

void render_sink(struct render *r, struct event_sink *s) {
  r->at_line_start = 1;
  s->emit = render_emit;
  s->ud = r;
}

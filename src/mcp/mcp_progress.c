/* mcp_progress.c - a server's notifications/progress, journaled within
 * bounds. The server picks how many it sends and how big they are (999 of
 * 16 MiB each would fill the disk with one call): each event keeps the
 * numbers and at most MCP_PROGRESS_MESSAGE bytes of message, and a call
 * journals its first MCP_PROGRESS_KEEP events, then only the latest, with
 * how many were skipped, when the call ends. */
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "events.h"
#include "mcp_impl.h"

static cJSON *bounded(const struct mcp_server *s, const cJSON *params) {
  cJSON *d = cJSON_CreateObject();
  cJSON_AddStringToObject(d, "server", s->name);
  cJSON *p = cJSON_AddObjectToObject(d, "progress");
  static const char *const nums[] = {"progress", "total", NULL};
  for (int i = 0; nums[i]; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(params, nums[i]);
    if (cJSON_IsNumber(v)) cJSON_AddNumberToObject(p, nums[i], v->valuedouble);
  }
  const char *msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(params, "message"));
  if (msg) {
    size_t n = strlen(msg);
    if (n > MCP_PROGRESS_MESSAGE) { /* cut on a character boundary */
      n = MCP_PROGRESS_MESSAGE;
      while (n && ((unsigned char)msg[n] & 0xC0) == 0x80) n--;
    }
    char *cut = xmalloc(n + 1);
    memcpy(cut, msg, n);
    cut[n] = 0;
    cJSON_AddStringToObject(p, "message", cut);
    free(cut);
    if (n < strlen(msg)) cJSON_AddTrueToObject(p, "message_cut");
  }
  return d;
}

void mcp__progress_begin(struct mcp_server *s) {
  s->progress_seen = 0;
  cJSON_Delete(s->progress_last);
  s->progress_last = NULL;
}

void mcp__progress(struct mcp_server *s, struct call_ctx *ctx, const cJSON *params) {
  if (!ctx || !ctx->events || !cJSON_IsObject(params)) return;
  cJSON *d = bounded(s, params);
  if (s->progress_seen++ < MCP_PROGRESS_KEEP) {
    events_emit(ctx->events, ctx->run_id, "mcp_progress", d);
    cJSON_Delete(d);
    return;
  }
  cJSON_Delete(s->progress_last); /* held back: only the latest is journaled, at the end */
  s->progress_last = d;
}

void mcp__progress_end(struct mcp_server *s, struct call_ctx *ctx) {
  if (s->progress_last && ctx && ctx->events) {
    cJSON_AddNumberToObject(s->progress_last, "skipped",
                            (double)(s->progress_seen - MCP_PROGRESS_KEEP - 1));
    events_emit(ctx->events, ctx->run_id, "mcp_progress", s->progress_last);
  }
  mcp__progress_begin(s);
}

/* render.h - event sinks that show a run: a terminal renderer (answer text
 * to stdout as it streams, tool activity to stderr) and a JSON-lines
 * renderer (one {"run_id","type","data"} object per line to stdout). Both
 * serve live runs (`luagent ask`) and replays (`luagent runs show`). */
#ifndef LUAGENT_RENDER_H
#define LUAGENT_RENDER_H

#include <stdio.h>

#include "events.h"

struct render {
  FILE *out;  /* answer text / JSON lines */
  FILE *info; /* tool activity (terminal renderer) */
  int json;   /* JSON lines instead of text */
  int at_line_start;
  int depth;        /* nested runs (delegate) indent their activity */
  char top_run[40]; /* the first run seen: nested runs' text is not the answer */
  int replay;       /* `runs show`: also the scripts' tool calls (script_tool_call) */
  const char *workspace; /* named in the `luagent approvals` hint; NULL: the current folder */
};

/* Fills s to render into r (zero r first, then set out/info/json). */
void render_sink(struct render *r, struct event_sink *s);
/* Renders one event (used by the sink and by replays). */
void render_event(struct render *r, const char *run_id, const char *type, const cJSON *data);

#endif

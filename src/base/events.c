/* events.c - see events.h. */
#include "events.h"

void events_emit(struct event_sink *s, const char *run_id, const char *type, const cJSON *data) {
  for (; s; s = s->next)
    if (s->emit) s->emit(s->ud, run_id, type, data);
}

/* test_session.c - session.c: names, save/load round trip, replace on
 * save, list, delete. */
#include <stdlib.h>
#include <unistd.h>

#include "session.h"
#include "test.h"
#include "util.h"

int main(void) {
  struct err e = {0};
  CHECK_INT(session_check_name("trip-1.a_b", &e), 0);
  CHECK(session_check_name("", &e) < 0);
  CHECK(session_check_name("-x", &e) < 0);
  CHECK(session_check_name("a b", &e) < 0);
  CHECK_CONTAINS(e.msg, "only letters, digits");
  CHECK(session_check_name("../x", &e) < 0);
  char name[SESSION_MAX_NAME + 1];
  session_new_name(name);
  CHECK_INT(session_check_name(name, &e), 0);
  CHECK(!strncmp(name, "chat-", 5));

  char dir[] = "/tmp/luagent_test_session_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[256];
  snprintf(path, sizeof path, "%s/state.db", dir);
  struct store *s = NULL;
  CHECK_INT(store_open_path(path, &s, &e), 0);
  cJSON *m = NULL;
  int exists = 1;
  CHECK_INT(session_load(s, "trip", &m, &exists, &e), 0);
  CHECK_INT(exists, 0);
  CHECK_INT(cJSON_GetArraySize(m), 0);
  cJSON_Delete(m);

  cJSON *h = cJSON_Parse(
      "[{\"role\":\"user\",\"content\":\"how far?\"},"
      "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c1\",\"name\":\"echo\","
      "\"arguments\":\"{}\"}]},"
      "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"name\":\"echo\",\"content\":\"{}\"},"
      "{\"role\":\"assistant\",\"content\":\"40 km\"}]");
  CHECK_INT(session_save(s, "trip", h, &e), 0);
  CHECK_INT(session_load(s, "trip", &m, &exists, &e), 0);
  CHECK_INT(exists, 1);
  char *a = cJSON_PrintUnformatted(h), *b = cJSON_PrintUnformatted(m);
  CHECK_STR(b, a);
  free(a);
  free(b);
  cJSON_Delete(m);
  /* saving again replaces (a compacted history gets shorter) */
  cJSON_DeleteItemFromArray(h, 0);
  cJSON_DeleteItemFromArray(h, 0);
  CHECK_INT(session_save(s, "trip", h, &e), 0);
  CHECK_INT(session_load(s, "trip", &m, &exists, &e), 0);
  CHECK_INT(cJSON_GetArraySize(m), 2);
  cJSON_Delete(m);
  CHECK_INT(session_save(s, "other", h, &e), 0);
  cJSON *l = NULL;
  CHECK_INT(session_list(s, &l, &e), 0);
  CHECK_INT(cJSON_GetArraySize(l), 2);
  CHECK_INT((int)cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(l, 0), "messages")),
            2);
  cJSON_Delete(l);
  CHECK_INT(session_delete(s, "trip", &e), 0);
  CHECK(session_delete(s, "trip", &e) == ERR_NOTFOUND);
  CHECK_CONTAINS(e.msg, "no session named 'trip'");
  CHECK_INT(session_list(s, &l, &e), 0);
  CHECK_INT(cJSON_GetArraySize(l), 1);
  cJSON_Delete(l);
  /* a corrupt row is reported, not crashed on */
  CHECK_INT(
      store_exec(s, "UPDATE messages SET content = 'nope' WHERE session = 'other' AND seq = 2", &e),
      0);
  CHECK(session_load(s, "other", &m, &exists, &e) < 0);
  CHECK_CONTAINS(e.msg, "session 'other': message 2");
  cJSON_Delete(m);
  cJSON_Delete(h);
  store_close(s);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK_INT(system(cmd), 0);
  return TEST_END();
}

/* test_mcp_discover.c - the 2026-07-28 pieces that need no server: the
 * per-request _meta (ours replace a caller's, the caller's other keys
 * stay) and the resultType check. The probe itself runs against fake and
 * real servers in tests/e2e/mcp_stateless.sh and mcp_real_everything.sh. */
#include <string.h>

#include "json.h"
#include "mcp_impl.h"
#include "test.h"

static const char *meta_str(const cJSON *p, const char *key) {
  const cJSON *meta = cJSON_GetObjectItemCaseSensitive(p, "_meta");
  return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, key));
}

static void test_params(void) {
  cJSON *p = mcp__stateless_params(NULL);
  CHECK_STR(meta_str(p, "io.modelcontextprotocol/protocolVersion"), "2026-07-28");
  const cJSON *meta = cJSON_GetObjectItemCaseSensitive(p, "_meta");
  const cJSON *caps = cJSON_GetObjectItemCaseSensitive(meta, "io.modelcontextprotocol/clientCapabilities");
  CHECK(cJSON_IsObject(caps) && caps->child == NULL); /* none declared: no MRTR yet */
  CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(meta, "io.modelcontextprotocol/clientInfo"), "name")),
            "luagent");
  cJSON_Delete(p);

  /* a caller's own _meta: its progressToken stays, its version does not */
  cJSON *in = cJSON_Parse("{\"name\":\"t\",\"arguments\":{\"a\":1},\"_meta\":{\"progressToken\":7,"
                          "\"io.modelcontextprotocol/protocolVersion\":\"1999-01-01\","
                          "\"io.modelcontextprotocol/clientCapabilities\":{\"sampling\":{}}}}");
  p = mcp__stateless_params(in);
  CHECK_STR(meta_str(p, "io.modelcontextprotocol/protocolVersion"), "2026-07-28");
  meta = cJSON_GetObjectItemCaseSensitive(p, "_meta");
  CHECK_INT((int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(meta, "progressToken")), 7);
  caps = cJSON_GetObjectItemCaseSensitive(meta, "io.modelcontextprotocol/clientCapabilities");
  CHECK(cJSON_IsObject(caps) && caps->child == NULL);
  CHECK_INT(cJSON_GetArraySize(meta), 4); /* progressToken, version, capabilities, clientInfo: no duplicates */
  CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "name")), "t");
  CHECK_STR(meta_str(in, "io.modelcontextprotocol/protocolVersion"), "1999-01-01"); /* borrowed, untouched */
  cJSON_Delete(p);
  cJSON_Delete(in);

  /* _meta that is not an object is replaced, not merged into */
  in = cJSON_Parse("{\"_meta\":\"x\"}");
  p = mcp__stateless_params(in);
  CHECK_STR(meta_str(p, "io.modelcontextprotocol/protocolVersion"), "2026-07-28");
  cJSON_Delete(p);
  cJSON_Delete(in);
}

static int result_rc(const char *json, char *code) {
  struct mcp_server s;
  memset(&s, 0, sizeof s);
  s.name = "srv";
  cJSON *r = cJSON_Parse(json);
  struct err e = {0};
  int rc = mcp__stateless_result(&s, "tools/call", r, &e);
  strcpy(code, rc ? e.code : "");
  if (rc) CHECK_CONTAINS(e.msg, "mcp server srv: tools/call");
  cJSON_Delete(r);
  return rc;
}

static void test_result(void) {
  char code[64];
  CHECK_INT(result_rc("{\"content\":[]}", code), 0); /* absent: complete */
  CHECK_INT(result_rc("{\"resultType\":\"complete\"}", code), 0);
  CHECK(result_rc("{\"resultType\":\"input_required\",\"inputRequests\":{}}", code) != 0);
  CHECK_STR(code, "mcp_unsupported");
  CHECK(result_rc("{\"resultType\":\"later\"}", code) != 0);
  CHECK_STR(code, "mcp_protocol");
  CHECK(result_rc("{\"resultType\":5}", code) != 0);
  CHECK_STR(code, "mcp_protocol");
}

int main(void) {
  test_params();
  test_result();
  return TEST_END();
}

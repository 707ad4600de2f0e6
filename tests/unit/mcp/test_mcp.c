/* test_mcp.c - the pieces of the MCP client that need no server: the
 * annotation rule, tool names, and the supervised process (line limits,
 * timeouts, exit status, stderr tail, environment, stop). */
#include <signal.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"
#include "mcp.h"
#include "mcp_impl.h"
#include "mcp_proc.h"
#include "test.h"
#include "util.h"

static void policy(const char *tool_json, const char *ov_imp, const char *ov_ow, enum impact want,
                   bool want_ow) {
  cJSON *t = cJSON_Parse(tool_json);
  cJSON *ow = ov_ow ? cJSON_Parse(ov_ow) : NULL;
  enum impact imp;
  bool o;
  mcp_tool_policy(t, ov_imp, ow, &imp, &o);
  CHECK_STR(impact_name(imp), impact_name(want));
  CHECK_INT(o, want_ow);
  cJSON_Delete(t);
  cJSON_Delete(ow);
}

static void test_policy(void) {
  policy("{}", NULL, NULL, IMPACT_MEDIUM, true);
  policy("{\"annotations\":{\"readOnlyHint\":true}}", NULL, NULL, IMPACT_READ, true);
  policy("{\"annotations\":{\"readOnlyHint\":true,\"destructiveHint\":true}}", NULL, NULL, IMPACT_READ, true);
  policy("{\"annotations\":{\"destructiveHint\":true}}", NULL, NULL, IMPACT_HIGH, true);
  policy("{\"annotations\":{\"destructiveHint\":false,\"openWorldHint\":false}}", NULL, NULL, IMPACT_MEDIUM, false);
  policy("{\"annotations\":{\"openWorldHint\":\"no\"}}", NULL, NULL, IMPACT_MEDIUM, true); /* not a boolean */
  policy("{\"annotations\":\"readOnly\"}", NULL, NULL, IMPACT_MEDIUM, true);
  /* a server that lies: the operator's override wins either way */
  policy("{\"annotations\":{\"readOnlyHint\":true,\"openWorldHint\":false}}", "critical", "true", IMPACT_CRITICAL, true);
  policy("{\"annotations\":{\"destructiveHint\":true}}", "low", "false", IMPACT_LOW, false);
}

static void test_names(void) {
  CHECK(mcp__tool_name_ok("echo"));
  CHECK(mcp__tool_name_ok("get-env"));
  CHECK(mcp__tool_name_ok("fs.delete"));
  CHECK(mcp__tool_name_ok("user-profile/update"));
  CHECK(!mcp__tool_name_ok(""));
  CHECK(!mcp__tool_name_ok(NULL));
  CHECK(!mcp__tool_name_ok("bad name"));
  CHECK(!mcp__tool_name_ok("../up"));
  CHECK(!mcp__tool_name_ok(".hidden"));
  CHECK(!mcp__tool_name_ok("a..b"));
  CHECK(!mcp__tool_name_ok("tab\tname"));
  CHECK(!mcp__tool_name_ok("\xc3\xa9t\xc3\xa9"));
  char longn[200];
  memset(longn, 'a', 129), longn[129] = 0;
  CHECK(!mcp__tool_name_ok(longn));
  longn[128] = 0;
  CHECK(mcp__tool_name_ok(longn));
  /* the hash covers what the model and the pipeline see, not _meta */
  cJSON *a = cJSON_Parse("{\"name\":\"x\",\"description\":\"d\",\"_meta\":{\"k\":1}}");
  cJSON *b = cJSON_Parse("{\"_meta\":{\"k\":2},\"description\":\"d\",\"name\":\"x\"}");
  cJSON *c = cJSON_Parse("{\"name\":\"x\",\"description\":\"d \"}");
  char ha[65], hb[65], hc[65];
  mcp__tool_hash(a, ha), mcp__tool_hash(b, hb), mcp__tool_hash(c, hc);
  CHECK_STR(ha, hb);
  CHECK(strcmp(ha, hc) != 0);
  cJSON_Delete(a), cJSON_Delete(b), cJSON_Delete(c);
}

/* 1 while pid runs: absent, or a zombie no one reaped yet (PID 1 in a
 * container may be slow to), counts as gone. */
static int running(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *close = strrchr(buf, ')');
  return close && close[1] == ' ' && close[2] != 'Z' && close[2] != 'X';
}

static void test_proc(void) {
  struct mcp_proc p;
  struct err e = {0};
  char *line;
  size_t len;
  /* lines, then one over the limit */
  char *a1[] = {"sh", "-c", "printf 'one\\ntwo\\r\\n'; printf 'xxxxxxxxxxxxxxxxxxxx\\n'; printf 'after\\n'", NULL};
  CHECK_INT(mcp_proc_start(&p, a1, NULL, NULL, NULL, 0, &e), 0);
  CHECK_INT(mcp_proc_read_line(&p, &line, &len, 10, util_monotonic() + 5, NULL, &e), 0);
  CHECK_STR(line, "one");
  free(line);
  CHECK_INT(mcp_proc_read_line(&p, &line, &len, 10, util_monotonic() + 5, NULL, &e), 0);
  CHECK_STR(line, "two"); /* CRLF tolerated */
  free(line);
  CHECK_INT(mcp_proc_read_line(&p, &line, &len, 10, util_monotonic() + 5, NULL, &e), ERR_LIMIT);
  CHECK_STR(e.code, "mcp_message_too_big");
  CHECK(line == NULL);
  mcp_proc_stop(&p, 0.2);

  /* a missing program is named */
  char *a2[] = {"/nonexistent/luagent-mcp-server", NULL};
  CHECK_INT(mcp_proc_start(&p, a2, NULL, NULL, NULL, 0, &e), ERR_IO);
  CHECK_CONTAINS(e.msg, "cannot start '/nonexistent/luagent-mcp-server'");
  CHECK_CONTAINS(e.msg, "No such file");

  /* exit status and the stderr tail */
  char *a3[] = {"sh", "-c", "echo 'it broke' >&2; exit 4", NULL};
  CHECK_INT(mcp_proc_start(&p, a3, NULL, NULL, NULL, 0, &e), 0);
  CHECK_INT(mcp_proc_read_line(&p, &line, &len, 100, util_monotonic() + 5, NULL, &e), ERR_IO);
  CHECK_STR(e.code, "mcp_exited");
  for (int i = 0; i < 100 && mcp_proc_alive(&p); i++) util_sleep(0.01);
  char how[64];
  mcp_proc_describe(&p, how, sizeof how);
  CHECK_STR(how, "exit status 4");
  CHECK_CONTAINS(p.tail, "it broke");
  mcp_proc_stop(&p, 0.2);

  /* the stderr log's rotation leaves nothing in the file it drops: a
   * hard link planted to the log keeps an empty file, not the old stderr */
  char dir[] = "/tmp/luagent_test_mcplog_XXXXXX", logp[128], planted[160], rotated[160];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(logp, sizeof logp, "%s/s.stderr.log", dir);
  snprintf(planted, sizeof planted, "%s/planted", dir);
  snprintf(rotated, sizeof rotated, "%s.1", logp);
  const char *stage[] = {"printf 'token=AAAA%0200d\\n' 0 >&2", "printf 'BBBB%0200d\\n' 0 >&2",
                         "printf 'CCCC%0200d\\n' 0 >&2"};
  struct stat lst;
  for (int k = 0; k < 3; k++) {
    char *a[] = {"sh", "-c", (char *)stage[k], NULL};
    CHECK_INT(mcp_proc_start(&p, a, NULL, NULL, logp, 300, &e), 0);
    for (int i = 0; i < 500 && mcp_proc_alive(&p); i++) util_sleep(0.01);
    mcp_proc_stop(&p, 0.2);
    if (k == 0) CHECK_INT(link(logp, planted), 0); /* the first log, planted */
  }
  CHECK_INT(stat(planted, &lst), 0);
  CHECK_INT((int)lst.st_nlink, 1);  /* its other names are gone ... */
  CHECK_INT((int)lst.st_size, 0);   /* ... and so is what it held */
  char *kept = NULL;
  size_t kept_len = 0;
  CHECK_INT(util_read_file(rotated, 4096, &kept, &kept_len, &e), 0);
  CHECK_CONTAINS(kept, "BBBB"); /* the old file kept is the previous log */
  free(kept);
  unlink(planted), unlink(rotated), unlink(logp), rmdir(dir);

  /* a silent server times out; a stop flag stops the wait */
  char *a4[] = {"sleep", "30", NULL};
  CHECK_INT(mcp_proc_start(&p, a4, NULL, NULL, NULL, 0, &e), 0);
  double t0 = util_monotonic();
  CHECK_INT(mcp_proc_read_line(&p, &line, &len, 100, t0 + 0.2, NULL, &e), ERR_LIMIT);
  CHECK_STR(e.code, "timeout");
  CHECK(util_monotonic() - t0 < 2);
  volatile int stop = 1;
  CHECK_INT(mcp_proc_read_line(&p, &line, &len, 100, util_monotonic() + 5, &stop, &e), ERR_STOPPED);
  pid_t pid = p.pid;
  mcp_proc_stop(&p, 0.1);
  CHECK(!running(pid)); /* gone */

  /* environment: luagent's own variables stay home; the config's arrive */
  setenv("LUAGENT_TEST_SECRET", "hunter2", 1);
  cJSON *env = cJSON_Parse("{\"GIVEN\":\"yes\"}");
  char *a5[] = {"sh", "-c", "echo \"[$LUAGENT_TEST_SECRET][$GIVEN][${PATH:+path}]\"", NULL};
  CHECK_INT(mcp_proc_start(&p, a5, env, "/", NULL, 0, &e), 0);
  CHECK_INT(mcp_proc_read_line(&p, &line, &len, 100, util_monotonic() + 5, NULL, &e), 0);
  CHECK_STR(line, "[][yes][path]");
  free(line);
  mcp_proc_stop(&p, 0.2);
  cJSON_Delete(env);

  /* stop takes the whole process group (a server's own children) */
  char *a6[] = {"sh", "-c", "sleep 60 & echo $!; wait", NULL};
  CHECK_INT(mcp_proc_start(&p, a6, NULL, NULL, NULL, 0, &e), 0);
  CHECK_INT(mcp_proc_read_line(&p, &line, &len, 100, util_monotonic() + 5, NULL, &e), 0);
  pid_t child = (pid_t)atoi(line);
  free(line);
  CHECK(child > 0 && running(child));
  mcp_proc_stop(&p, 0.1);
  int gone = 0;
  for (int i = 0; i < 100 && !gone; i++) {
    gone = !running(child);
    if (!gone) util_sleep(0.01);
  }
  CHECK(gone);

  /* stopping a process never started is a no-op */
  struct mcp_proc z;
  mcp_proc_init(&z);
  mcp_proc_stop(&z, 0);
  mcp_free(NULL);
}

int main(void) {
  test_policy();
  test_names();
  test_proc();
  return TEST_END();
}

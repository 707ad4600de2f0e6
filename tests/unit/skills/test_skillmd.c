/* test_skillmd.c - SKILL.md front matter parsing. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "skillmd.h"
#include "test.h"
#include "util.h"

struct probs {
  int n, fatal;
  int line[16];
  char msg[16][512];
};

static void collect(void *ud, int line, bool fatal, const char *msg) {
  struct probs *p = ud;
  if (p->n < 16) {
    p->line[p->n] = line;
    snprintf(p->msg[p->n], sizeof p->msg[0], "%s", msg);
  }
  p->n++;
  p->fatal += fatal;
}

static struct skillmd *parse(const char *text, struct probs *p, int *rc, struct err *e) {
  struct skillmd *m = NULL;
  memset(p, 0, sizeof *p);
  *rc = skillmd_parse(text, strlen(text), "skills/x/SKILL.md", collect, p, &m, e);
  return m;
}

static void test_basic(void) {
  struct probs p;
  struct err e;
  int rc;
  struct skillmd *m = parse(
      "---\n"
      "name: notes\n"
      "description: >\n"
      "  Keep notes\n"
      "  in the workspace.\n"
      "tags: [notes, files]\n"
      "keywords: memo, jot down\n"
      "examples:\n"
      "  - write down that the meeting moved\n"
      "  - \"what did I note: yesterday\"\n"
      "metadata:\n"
      "  requires: {bins: [x]}\n"
      "  count: 4\n"
      "version: 1.0.0\n"
      "always: true\n"
      "---\n"
      "\n"
      "# Notes\nBody text.\n",
      &p, &rc, &e);
  CHECK_INT(rc, 0);
  CHECK_INT(p.n, 0);
  CHECK(m != NULL);
  if (!m) return;
  CHECK_STR(m->name, "notes");
  CHECK_STR(m->description, "Keep notes in the workspace.\n");
  CHECK_INT(skillmd_list_len(m->tags), 2);
  CHECK_STR(m->tags[1], "files");
  CHECK_INT(skillmd_list_len(m->keywords), 2);
  CHECK_STR(m->keywords[1], "jot down");
  CHECK_INT(skillmd_list_len(m->examples), 2);
  CHECK_STR(m->examples[1], "what did I note: yesterday");
  CHECK(m->always);
  CHECK_INT(m->name_line, 2);
  CHECK_INT(m->description_line, 3);
  CHECK_STR(m->body, "# Notes\nBody text.\n");
  CHECK_INT(m->body_line, 17);
  const cJSON *md = cJSON_GetObjectItem(m->front, "metadata");
  CHECK(cJSON_IsNumber(cJSON_GetObjectItem(md, "count")));
  CHECK_STR(cJSON_GetObjectItem(m->front, "version")->valuestring, "1.0.0");
  skillmd_free(m);
}

static void test_crlf_and_unicode(void) {
  struct probs p;
  struct err e;
  int rc;
  struct skillmd *m = parse(
      "---\r\nname: lark-im\r\ndescription: \"飞书即时通讯：收发消息\"\r\n"
      "---\r\n\r\nline one\r\nline two\r\n",
      &p, &rc, &e);
  CHECK_INT(rc, 0);
  if (!m) return;
  CHECK_STR(m->description, "飞书即时通讯：收发消息");
  CHECK_STR(m->body, "line one\nline two\n");
  skillmd_free(m);
}

static void test_errors(void) {
  struct probs p;
  struct err e;
  int rc;
  struct skillmd *m = parse("# no front matter\n", &p, &rc, &e);
  CHECK(rc < 0 && !m);
  CHECK_CONTAINS(e.msg, "skills/x/SKILL.md:1: no YAML front matter");
  CHECK_INT(p.fatal, 1);

  m = parse("---\nname: x\ndescription: y\n", &p, &rc, &e);
  CHECK(rc < 0);
  CHECK_CONTAINS(e.msg, "not closed");

  /* A broken flow sequence on line 4 of the file. */
  m = parse("---\nname: x\ndescription: y\ntags: [a, b\n---\nbody\n", &p, &rc, &e);
  CHECK(rc < 0 && !m);
  CHECK_CONTAINS(e.msg, "skills/x/SKILL.md:");
  CHECK_CONTAINS(e.msg, "not valid YAML");
  CHECK(p.n == 1 && p.line[0] >= 4 && p.line[0] <= 5);

  /* Not a mapping. */
  m = parse("---\n- a\n- b\n---\n", &p, &rc, &e);
  CHECK(rc < 0);
  CHECK_CONTAINS(e.msg, "must be a YAML mapping");

  /* Wrong types are problems, not failures. */
  m = parse("---\nname: [a]\ndescription: d\ntags: {a: 1}\n---\n", &p, &rc, &e);
  CHECK_INT(rc, 0);
  CHECK(m && m->name == NULL);
  CHECK_INT(p.n, 2);
  CHECK_INT(p.line[0], 2);
  CHECK_CONTAINS(p.msg[0], "'name' must be a string");
  CHECK_INT(p.line[1], 4);
  skillmd_free(m);
}

static void test_lenient(void) {
  /* The most common invalid YAML in the wild: ": " inside a plain value. */
  struct probs p;
  struct err e;
  int rc;
  struct skillmd *m = parse(
      "---\nname: py\ndescription: Automations for REST APIs: retries, "
      "paging. Use when: calling APIs.\n---\nbody\n",
      &p, &rc, &e);
  CHECK_INT(rc, 0);
  CHECK_INT(p.n, 1);
  CHECK_INT(p.fatal, 0);
  CHECK_INT(p.line[0], 3);
  CHECK_CONTAINS(p.msg[0], "mapping values are not allowed");
  if (m)
    CHECK_STR(m->description,
              "Automations for REST APIs: retries, paging. Use when: calling APIs.");
  skillmd_free(m);
}

/* Every SKILL.md from the wild must parse or fail with a file:line. */
static void test_corpus(void) {
  const char *src = getenv("LUAGENT_SOURCE_DIR");
  char dir[4096];
  /* ../shared next to the checkout (CI, main); worktrees sit one deeper. */
  snprintf(dir, sizeof dir, "%s/../shared/data/agent-skills/skills", src ? src : ".");
  DIR *d = opendir(dir);
  if (!d) {
    snprintf(dir, sizeof dir, "%s/../../shared/data/agent-skills/skills", src ? src : ".");
    d = opendir(dir);
  }
  if (!d) {
    printf("corpus %s not found; skipped\n", dir);
    return;
  }
  int files = 0, ok = 0, recovered = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    char path[8192];
    snprintf(path, sizeof path, "%s/%s/SKILL.md", dir, de->d_name);
    char *text;
    size_t len;
    struct err e;
    if (util_read_file(path, 1 << 20, &text, &len, &e)) continue;
    files++;
    struct probs p;
    memset(&p, 0, sizeof p);
    struct skillmd *m = NULL;
    int rc = skillmd_parse(text, len, de->d_name, collect, &p, &m, &e);
    if (rc == 0) {
      ok++;
      CHECK(m->name && m->description && m->description[0]);
      CHECK(m->body && m->body[0]);
      CHECK(m->name_line >= 2);
      for (int i = 0; i < p.n && i < 16; i++) {
        if (strstr(p.msg[i], "not valid YAML")) {
          recovered++;
          CHECK(p.line[i] == 3);
          printf("  %s:%d: %s\n", de->d_name, p.line[i], p.msg[i]);
        }
      }
    } else {
      printf("  %s\n", e.msg);
    }
    skillmd_free(m);
    free(text);
  }
  closedir(d);
  printf("corpus: %d files, %d loaded, %d with recovered YAML errors\n", files, ok, recovered);
  CHECK_INT(files, 75);
  CHECK_INT(ok, 75);
  CHECK_INT(recovered, 2);
}

/* Issue 18 item 13: hostile front matter is refused at its bound, early,
 * with a message naming the bound, the file and the line (the old loader
 * took seconds on 80 KB of nested flow sequences and 100,000 keys). */
static void test_bounds(void) {
  struct probs p;
  struct err e;
  int rc;
  struct sbuf b = {0};
  /* 60,000 nested flow sequences: under the size cap, past the depth. */
  sbuf_puts(&b, "---\nname: a\ndescription: x\nk: ");
  for (int i = 0; i < 30000; i++) sbuf_puts(&b, "[");
  for (int i = 0; i < 30000; i++) sbuf_puts(&b, "]");
  sbuf_puts(&b, "\n---\nbody\n");
  struct skillmd *m = parse(b.s, &p, &rc, &e);
  CHECK(!m);
  CHECK_STR(e.msg, "skills/x/SKILL.md:4: front matter is nested deeper than 64 levels");
  sbuf_free(&b);
  /* The same after a line the lenient retry re-quotes. */
  sbuf_puts(&b, "---\nname: a\ndescription: x: y\nk: ");
  for (int i = 0; i < 10000; i++) sbuf_puts(&b, "{a: ");
  sbuf_puts(&b, "\n---\n");
  m = parse(b.s, &p, &rc, &e);
  CHECK(!m);
  CHECK_CONTAINS(e.msg, "nested deeper than 64 levels");
  sbuf_free(&b);
  /* Many keys in one mapping. */
  sbuf_puts(&b, "---\nname: a\ndescription: x\n");
  for (int i = 0; i < 1500; i++) sbuf_printf(&b, "k%d: 1\n", i);
  sbuf_puts(&b, "---\n");
  m = parse(b.s, &p, &rc, &e);
  CHECK(!m);
  CHECK_STR(e.msg, "skills/x/SKILL.md:1002: a mapping in the front matter has more than 1000 keys");
  sbuf_free(&b);
  /* Size. */
  sbuf_puts(&b, "---\nname: a\ndescription: x\nk: \"");
  for (int i = 0; i < 70000; i++) sbuf_puts(&b, "x");
  sbuf_puts(&b, "\"\n---\n");
  m = parse(b.s, &p, &rc, &e);
  CHECK(!m);
  CHECK_STR(e.msg, "skills/x/SKILL.md:2: front matter is larger than 64 KiB");
  CHECK_INT(p.fatal, 1);
  sbuf_free(&b);
  /* Aliases of a big scalar: bytes, not only nodes, are bounded. */
  sbuf_puts(&b, "---\nname: a\ndescription: x\nbig: &s \"");
  for (int i = 0; i < 30000; i++) sbuf_puts(&b, "x");
  sbuf_puts(&b, "\"\nk: [");
  for (int i = 0; i < 8000; i++) sbuf_puts(&b, i ? ",*s" : "*s");
  sbuf_puts(&b, "]\n---\n");
  m = parse(b.s, &p, &rc, &e);
  CHECK(!m);
  CHECK_CONTAINS(e.msg, "too large");
  sbuf_free(&b);
  /* At the bounds it still loads. */
  sbuf_puts(&b, "---\nname: a\ndescription: x\nk: ");
  for (int i = 0; i < 60; i++) sbuf_puts(&b, "[");
  for (int i = 0; i < 60; i++) sbuf_puts(&b, "]");
  sbuf_puts(&b, "\n---\n");
  m = parse(b.s, &p, &rc, &e);
  CHECK(m != NULL);
  skillmd_free(m);
  sbuf_free(&b);
}

int main(void) {
  test_bounds();
  test_basic();
  test_crlf_and_unicode();
  test_errors();
  test_lenient();
  test_corpus();
  return TEST_END();
}

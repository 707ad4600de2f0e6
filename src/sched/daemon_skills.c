/* daemon_skills.c - the daemon keeps the last good version of each skill.
 *
 * Workers load the skills when they start, and the daemon retires its
 * workers when skills/ changes. Loading straight from skills/ would let one
 * bad save (a syntax error, an error at load) take that skill, and every
 * automation calling its tools, out of all new workers. So the daemon hands
 * its workers a generation instead: .luagent/daemon-skills/<N>/<folder>/, a
 * copy of the files the loader reads. Each generation is checked before
 * any worker sees it (the probe loads it as a worker would); a folder that
 * does not load wholly gets the previous generation's copy when that one
 * was good, and is reported once with file:line. When the file is fixed,
 * the next generation takes it and a line says so. A folder that never
 * loaded stays as it is, marked with a .broken file, so workers skip it as
 * they always did. Generations outlive a restart (the newest one is the
 * last good state); the two newest are kept.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon_impl.h"
#include "json.h"

/* What the skill loader reads in a folder (skills.c load_folder). */
static const char *const loaded_files[] = {"skill.lua", "SKILL.md", "skill.md", NULL};
#define MAX_SKILL_COPY (1u << 20) /* the loader's own cap on a skill file */

static int is_dir(const char *p) {
  struct stat st;
  return !stat(p, &st) && S_ISDIR(st.st_mode);
}

static int exists(const char *p) {
  struct stat st;
  return !lstat(p, &st);
}

/* Removes a generation (gen/folder/file, nothing deeper is ever made). */
static void remove_tree(const char *path, int depth) {
  DIR *dh = depth < 3 ? opendir(path) : NULL;
  if (dh) {
    struct dirent *de;
    while ((de = readdir(dh))) {
      if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
      char p[4600];
      snprintf(p, sizeof p, "%s/%s", path, de->d_name);
      struct stat st;
      if (!lstat(p, &st) && S_ISDIR(st.st_mode))
        remove_tree(p, depth + 1);
      else
        unlink(p);
    }
    closedir(dh);
  }
  rmdir(path);
}

static int copy_file(const char *from, const char *to) {
  char *text = NULL;
  size_t len = 0;
  struct err e;
  if (util_read_file(from, MAX_SKILL_COPY, &text, &len, &e)) return -1;
  FILE *f = fopen(to, "wb");
  int rc = f && fwrite(text, 1, len, f) == len ? 0 : -1;
  if (f && fclose(f)) rc = -1;
  free(text);
  return rc;
}

/* Copies the loader's files of folder `from` into the new folder `to`. */
static void copy_folder(const char *from, const char *to) {
  mkdir(to, 0700);
  for (int i = 0; loaded_files[i]; i++) {
    char a[4700], b[4700];
    struct stat st;
    snprintf(a, sizeof a, "%s/%s", from, loaded_files[i]);
    snprintf(b, sizeof b, "%s/%s", to, loaded_files[i]);
    if (!stat(a, &st) && S_ISREG(st.st_mode)) copy_file(a, b);
  }
}

/* 1 when the two folders hold the same loader files, byte for byte. */
static int same_folder(const char *a, const char *b) {
  for (int i = 0; loaded_files[i]; i++) {
    char pa[4700], pb[4700];
    snprintf(pa, sizeof pa, "%s/%s", a, loaded_files[i]);
    snprintf(pb, sizeof pb, "%s/%s", b, loaded_files[i]);
    char *ta = NULL, *tb = NULL;
    size_t la = 0, lb = 0;
    struct err e;
    int ha = !util_read_file(pa, MAX_SKILL_COPY, &ta, &la, &e);
    int hb = !util_read_file(pb, MAX_SKILL_COPY, &tb, &lb, &e);
    int same = ha == hb && (!ha || (la == lb && !memcmp(ta, tb, la)));
    free(ta);
    free(tb);
    if (!same) return 0;
  }
  return 1;
}

/* The newest generation number under root (0: none). */
static long newest_generation(const char *root) {
  long best = 0;
  DIR *dh = opendir(root);
  if (!dh) return 0;
  struct dirent *de;
  while ((de = readdir(dh))) {
    char *end;
    long n = strtol(de->d_name, &end, 10);
    if (de->d_name[0] != '.' && !*end && n > best) best = n;
  }
  closedir(dh);
  return best;
}

static void remove_old_generations(const char *root, long keep_a, long keep_b) {
  DIR *dh = opendir(root);
  if (!dh) return;
  struct dirent *de;
  while ((de = readdir(dh))) {
    if (de->d_name[0] == '.') continue;
    char *end;
    long n = strtol(de->d_name, &end, 10);
    if (*end || n == keep_a || n == keep_b) continue;
    char p[4600];
    snprintf(p, sizeof p, "%s/%s", root, de->d_name);
    remove_tree(p, 1);
  }
  closedir(dh);
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

void daemon__skills_refresh(struct daemon *d, int startup) {
  if (!d->o.skills_probe || d->oneshot) return;
  char root[4200], src[4200];
  snprintf(root, sizeof root, "%s/.luagent/daemon-skills", d->ws);
  snprintf(src, sizeof src, "%s/skills", d->ws);
  struct err e = {0};
  if (util_mkdirs(root, 0700, &e)) {
    daemon__complain("skills: %s (workers load skills/ as it is)", e.msg);
    d->skills_gen[0] = '\0';
    return;
  }
  long last = newest_generation(root);
  char prev[4300] = "";
  if (last > 0) snprintf(prev, sizeof prev, "%s/%ld", root, last);
  long n = last + 1;
  char gen[4300];
  snprintf(gen, sizeof gen, "%s/%ld", root, n);
  remove_tree(gen, 1); /* a leftover of a crash */
  if (mkdir(gen, 0700)) {
    daemon__complain("skills: cannot create %s: %s (workers load skills/ as it is)", gen,
                     strerror(errno));
    d->skills_gen[0] = '\0';
    return;
  }

  /* 1. copy what the loader would read from skills/ */
  char **names = NULL;
  size_t nn = 0, cap = 0;
  DIR *dh = opendir(src);
  struct dirent *de;
  while (dh && (de = readdir(dh))) {
    char p[4600];
    snprintf(p, sizeof p, "%s/%s", src, de->d_name);
    if (de->d_name[0] == '.' || !is_dir(p)) continue;
    if (nn == cap) names = xrealloc(names, sizeof *names * (cap = cap ? cap * 2 : 16));
    names[nn++] = xstrdup(de->d_name);
  }
  if (dh) closedir(dh);
  if (nn > 1) qsort(names, nn, sizeof *names, cmp_names);
  for (size_t i = 0; i < nn; i++) {
    char a[4600], b[4600];
    snprintf(a, sizeof a, "%s/%s", src, names[i]);
    snprintf(b, sizeof b, "%s/%s", gen, names[i]);
    copy_folder(a, b);
  }

  /* 2. load it as a worker would */
  cJSON *bad = NULL;
  if (d->o.skills_probe(d->ws, gen, &bad, &e)) {
    /* e.g. luagent.lua does not load: the config reload says so; the
     * workers keep the generation they have */
    remove_tree(gen, 1);
    goto out;
  }

  /* 3. a folder that does not load keeps its last good copy */
  const cJSON *it;
  cJSON_ArrayForEach(it, bad) {
    const char *folder = it->string, *msg = cJSON_GetStringValue(it);
    char pf[4600], pb[4700], gf[4600];
    snprintf(pf, sizeof pf, "%s/%s", prev, folder);
    snprintf(pb, sizeof pb, "%s/.broken", pf);
    snprintf(gf, sizeof gf, "%s/%s", gen, folder);
    int good = prev[0] && is_dir(pf) && !exists(pb);
    if (good) {
      remove_tree(gf, 2);
      copy_folder(pf, gf);
    } else {
      char mark[4700];
      snprintf(mark, sizeof mark, "%s/.broken", gf);
      FILE *f = fopen(mark, "w");
      if (f) fclose(f);
    }
    const cJSON *was = cJSON_GetObjectItemCaseSensitive(d->skills_bad, folder);
    if (!cJSON_IsString(was) || strcmp(was->valuestring, msg ? msg : ""))
      daemon__complain("%s (%s)", msg ? msg : folder,
                       good ? "keeping the last good version of the skill"
                            : "the skill is not loaded; no earlier version to keep");
  }
  /* 4. fixed, changed and new skills */
  for (size_t i = 0; i < nn; i++) {
    if (cJSON_GetObjectItemCaseSensitive(bad, names[i])) continue;
    char pf[4600], pb[4700], gf[4600];
    snprintf(pf, sizeof pf, "%s/%s", prev, names[i]);
    snprintf(pb, sizeof pb, "%s/.broken", pf);
    snprintf(gf, sizeof gf, "%s/%s", gen, names[i]);
    if (cJSON_GetObjectItemCaseSensitive(d->skills_bad, names[i]))
      daemon__say(d, "skills/%s: fixed; the new version is loaded", names[i]);
    else if (!startup && prev[0] && (!is_dir(pf) || exists(pb)))
      daemon__say(d, "skills/%s: loaded", names[i]);
    else if (!startup && prev[0] && !same_folder(pf, gf))
      daemon__say(d, "skills/%s: reloaded", names[i]);
  }
  cJSON_Delete(d->skills_bad);
  d->skills_bad = bad;
  bad = NULL;
  snprintf(d->skills_gen, sizeof d->skills_gen, "%s", gen);
  remove_old_generations(root, n, last);
out:
  cJSON_Delete(bad);
  for (size_t i = 0; i < nn; i++) free(names[i]);
  free(names);
}

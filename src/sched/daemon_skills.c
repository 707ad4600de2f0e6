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
 * was good, and is reported once with file:line (and at every later
 * generation, shorter, so a kept version never runs unnoticed). When the
 * file is fixed, the next generation takes it and a line says so. A folder
 * that never loaded stays as it is, marked with a .broken file, so workers
 * skip it as they always did. A folder without its skill file (deleted or
 * renamed: the operator's way to take a skill out) is removed, never kept.
 *
 * Generations outlive a restart; the two newest are kept. Only generations
 * this daemon (or an earlier run of it) made are trusted: each is recorded
 * in state.db (daemon_skill_gens) with the hash of its content, and the last
 * good state is the newest recorded one whose content still matches. A
 * folder there that nobody recorded (a copied or unpacked workspace, a
 * shared volume) is neither used nor deleted, and removal never follows a
 * symbolic link (openat O_NOFOLLOW, unlinkat).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdint.h>
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

/* Generation numbers this daemon writes: 1..MAX_GEN, decimal, no leading
 * zero. Anything else under .luagent/daemon-skills/ is not ours. */
#define MAX_GEN 999999999L

static long gen_number(const char *name) {
  size_t n = strlen(name);
  if (n == 0 || n > 9 || name[0] == '0') return 0;
  for (size_t i = 0; i < n; i++)
    if (name[i] < '0' || name[i] > '9') return 0;
  return strtol(name, NULL, 10);
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The entries of the open folder dfd (not . and ..), sorted; dfd stays
 * open. Returns -1 when it cannot be read. */
static int list_at(int dfd, char ***names, size_t *nn) {
  *names = NULL;
  *nn = 0;
  int fd = dup(dfd);
  DIR *dh = fd >= 0 ? fdopendir(fd) : NULL;
  if (!dh) {
    if (fd >= 0) close(fd);
    return -1;
  }
  rewinddir(dh);
  size_t cap = 0;
  struct dirent *de;
  while ((de = readdir(dh))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    if (*nn == cap) *names = xrealloc(*names, sizeof **names * (cap = cap ? cap * 2 : 16));
    (*names)[(*nn)++] = xstrdup(de->d_name);
  }
  closedir(dh);
  if (*nn > 1) qsort(*names, *nn, sizeof **names, cmp_names);
  return 0;
}

static void free_names(char **names, size_t nn) {
  for (size_t i = 0; i < nn; i++) free(names[i]);
  free(names);
}

/* Removes generation `name` under rootfd: gen/folder/file is all the daemon
 * ever makes. Never follows a link (a generation or a folder that is a
 * link, or anything deeper, is left alone and named in the log). */
static void remove_generation(int rootfd, const char *name) {
  int gfd = openat(rootfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (gfd < 0) {
    struct stat st;
    if (fstatat(rootfd, name, &st, AT_SYMLINK_NOFOLLOW)) return; /* already gone */
    daemon__complain("skills: not removing .luagent/daemon-skills/%s: %s (the daemon did not make it)",
                     name, S_ISLNK(st.st_mode) ? "it is a symbolic link" : "it is not a folder");
    return;
  }
  char **folders;
  size_t nf;
  if (!list_at(gfd, &folders, &nf)) {
    for (size_t i = 0; i < nf; i++) {
      int ffd = openat(gfd, folders[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (ffd < 0) {
        struct stat st;
        if (!fstatat(gfd, folders[i], &st, AT_SYMLINK_NOFOLLOW) && S_ISREG(st.st_mode))
          unlinkat(gfd, folders[i], 0);
        else
          daemon__complain("skills: not removing .luagent/daemon-skills/%s/%s: not a plain folder",
                           name, folders[i]);
        continue;
      }
      char **files;
      size_t nfi;
      if (!list_at(ffd, &files, &nfi)) {
        for (size_t k = 0; k < nfi; k++) {
          struct stat st;
          if (!fstatat(ffd, files[k], &st, AT_SYMLINK_NOFOLLOW) && S_ISREG(st.st_mode))
            unlinkat(ffd, files[k], 0);
          else
            daemon__complain("skills: not removing .luagent/daemon-skills/%s/%s/%s: not a plain file",
                             name, folders[i], files[k]);
        }
        free_names(files, nfi);
      }
      close(ffd);
      unlinkat(gfd, folders[i], AT_REMOVEDIR);
    }
    free_names(folders, nf);
  }
  close(gfd);
  unlinkat(rootfd, name, AT_REMOVEDIR);
}

/* The content hash of generation `name` (hex into out): every folder name,
 * file name and file content, in order. Returns -1 (with *why) when it is
 * not the plain gen/folder/file tree the daemon writes. */
static int hash_generation(int rootfd, const char *name, char out[65], const char **why) {
  *why = "it cannot be read";
  int gfd = openat(rootfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (gfd < 0) {
    *why = errno == ENOENT ? "it is gone" : "it is not a plain folder";
    return -1;
  }
  crypto_generichash_state h;
  crypto_generichash_init(&h, NULL, 0, 32);
  char **folders = NULL;
  size_t nf = 0;
  int rc = list_at(gfd, &folders, &nf);
  for (size_t i = 0; !rc && i < nf; i++) {
    int ffd = openat(gfd, folders[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (ffd < 0) {
      *why = "it holds something that is not a plain folder";
      rc = -1;
      break;
    }
    crypto_generichash_update(&h, (const unsigned char *)"D", 1);
    crypto_generichash_update(&h, (const unsigned char *)folders[i], strlen(folders[i]) + 1);
    char **files = NULL;
    size_t nfi = 0;
    rc = list_at(ffd, &files, &nfi);
    for (size_t k = 0; !rc && k < nfi; k++) {
      int fd = openat(ffd, files[k], O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
      struct stat st;
      if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size > (off_t)MAX_SKILL_COPY) {
        *why = "it holds something that is not a plain file the daemon wrote";
        rc = -1;
      } else {
        unsigned char buf[8192], len[8];
        for (int b = 0; b < 8; b++) len[b] = (unsigned char)((uint64_t)st.st_size >> (8 * b));
        crypto_generichash_update(&h, (const unsigned char *)"F", 1);
        crypto_generichash_update(&h, (const unsigned char *)files[k], strlen(files[k]) + 1);
        crypto_generichash_update(&h, len, sizeof len);
        ssize_t r;
        while ((r = read(fd, buf, sizeof buf)) > 0) crypto_generichash_update(&h, buf, (size_t)r);
        if (r < 0) rc = -1;
      }
      if (fd >= 0) close(fd);
    }
    free_names(files, nfi);
    close(ffd);
  }
  free_names(folders, nf);
  close(gfd);
  unsigned char d[32];
  crypto_generichash_final(&h, d, sizeof d);
  if (rc) return -1;
  util_hex(d, sizeof d, out);
  return 0;
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

/* ------------------------------------------------ the generations' record */

static int db_exec(struct daemon *d, const char *sql, long gen, const char *t1, const char *t2) {
  sqlite3_stmt *st;
  struct err e;
  if (store_prepare(d->st, sql, &st, &e)) {
    daemon__complain("skills: %s", e.msg);
    return -1;
  }
  sqlite3_bind_int64(st, 1, gen);
  if (t1) sqlite3_bind_text(st, 2, t1, -1, SQLITE_TRANSIENT);
  if (t2) sqlite3_bind_text(st, 3, t2, -1, SQLITE_TRANSIENT);
  int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
  if (rc) daemon__complain("skills: state.db: %s", sqlite3_errmsg(store_db(d->st)));
  sqlite3_finalize(st);
  return rc;
}

/* The recorded generations, newest first: gens[i] with hashes[i] (NULL
 * while being made; caller frees both). */
static size_t db_generations(struct daemon *d, long **gens, char ***hashes) {
  *gens = NULL;
  *hashes = NULL;
  sqlite3_stmt *st;
  struct err e;
  if (store_prepare(d->st, "SELECT gen, hash FROM daemon_skill_gens ORDER BY gen DESC", &st, &e)) {
    daemon__complain("skills: %s", e.msg);
    return 0;
  }
  size_t n = 0, cap = 0;
  while (sqlite3_step(st) == SQLITE_ROW) {
    if (n == cap) {
      cap = cap ? cap * 2 : 8;
      *gens = xrealloc(*gens, sizeof **gens * cap);
      *hashes = xrealloc(*hashes, sizeof **hashes * cap);
    }
    (*gens)[n] = (long)sqlite3_column_int64(st, 0);
    const char *h = (const char *)sqlite3_column_text(st, 1);
    (*hashes)[n++] = h ? xstrdup(h) : NULL;
  }
  sqlite3_finalize(st);
  return n;
}

/* 1 when the folder holds a file the loader reads (0: the skill file was
 * deleted or renamed: the operator removed the skill). */
static int has_skill_file(const char *folder) {
  for (int i = 0; loaded_files[i]; i++) {
    char p[4700];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", folder, loaded_files[i]);
    if (!stat(p, &st) && S_ISREG(st.st_mode)) return 1;
  }
  return 0;
}

int daemon_skills_kept(const char *workspace, cJSON **kept, struct err *e) {
  *kept = NULL;
  char path[4200];
  snprintf(path, sizeof path, "%s/.luagent/state.db", workspace);
  struct stat st;
  if (stat(path, &st)) return 0; /* no daemon ever ran here */
  struct store *s;
  if (store_open_path(path, &s, e)) return -1;
  sqlite3_stmt *q;
  int rc = store_prepare(
      s, "SELECT kept FROM daemon_skill_gens WHERE hash IS NOT NULL ORDER BY gen DESC LIMIT 1", &q, e);
  if (!rc) {
    if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_text(q, 0))
      *kept = cJSON_Parse((const char *)sqlite3_column_text(q, 0));
    sqlite3_finalize(q);
  }
  store_close(s);
  return rc ? -1 : 0;
}

void daemon__skills_refresh(struct daemon *d, int startup) {
  if (!d->o.skills_probe || d->oneshot) return;
  char root[4200], src[4200];
  snprintf(root, sizeof root, "%s/.luagent/daemon-skills", d->ws);
  snprintf(src, sizeof src, "%s/skills", d->ws);
  struct err e = {0};
  char **names = NULL;
  size_t nn = 0;
  long *gens = NULL;
  char **hashes = NULL;
  size_t ng = 0;
  cJSON *bad = NULL, *kept = NULL;
  if (util_mkdirs(root, 0700, &e)) {
    daemon__complain("skills: %s (workers load skills/ as it is)", e.msg);
    d->skills_gen[0] = '\0';
    return;
  }
  int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (rootfd < 0) {
    daemon__complain("skills: cannot open %s: %s (workers load skills/ as it is)", root,
                     strerror(errno));
    d->skills_gen[0] = '\0';
    return;
  }
  daemon__tx_commit(d); /* the record below is written as it happens */

  /* The last good version is the newest generation this daemon recorded
   * whose content is still what it wrote; a leftover of a crash (no hash
   * yet) goes. Folders nobody recorded (copied in, planted) are never
   * used nor deleted. */
  ng = db_generations(d, &gens, &hashes);
  long last = 0, top = 0;
  for (size_t i = 0; i < ng; i++) {
    char nm[24], h[65];
    const char *why;
    snprintf(nm, sizeof nm, "%ld", gens[i]);
    if (gens[i] > top) top = gens[i];
    if (!hashes[i]) {
      remove_generation(rootfd, nm);
      db_exec(d, "DELETE FROM daemon_skill_gens WHERE gen = ?1", gens[i], NULL, NULL);
    } else if (!last && hash_generation(rootfd, nm, h, &why)) {
      daemon__complain("skills: .luagent/daemon-skills/%s is not used: %s", nm, why);
    } else if (!last && strcmp(h, hashes[i])) {
      daemon__complain("skills: .luagent/daemon-skills/%s is not used: it changed since the daemon "
                       "wrote it", nm);
    } else if (!last) {
      last = gens[i];
    }
  }
  char **disk = NULL;
  size_t nd = 0;
  list_at(rootfd, &disk, &nd);
  for (size_t i = 0; i < nd; i++) {
    long g = gen_number(disk[i]);
    int known = 0;
    for (size_t k = 0; g && k < ng; k++) known |= gens[k] == g;
    if (!known && startup)
      daemon__complain("skills: ignoring .luagent/daemon-skills/%s: the daemon did not make it",
                       disk[i]);
  }
  free_names(disk, nd);
  /* the next number after the recorded ones (a planted huge number cannot
   * use them up), past any folder someone else made there */
  struct stat sst;
  char gname[24];
  do snprintf(gname, sizeof gname, "%ld", ++top);
  while (top < MAX_GEN && !fstatat(rootfd, gname, &sst, AT_SYMLINK_NOFOLLOW));
  if (top >= MAX_GEN) {
    daemon__complain("skills: no generation number left under %s (workers load skills/ as it is)",
                     root);
    d->skills_gen[0] = '\0';
    goto out;
  }
  char prev[4300] = "";
  if (last > 0) snprintf(prev, sizeof prev, "%s/%ld", root, last);
  long n = top;
  char gen[4300];
  snprintf(gen, sizeof gen, "%s/%s", root, gname);
  if (db_exec(d, "INSERT INTO daemon_skill_gens (gen, created) VALUES (?1, julianday('now'))", n,
              NULL, NULL)) {
    d->skills_gen[0] = '\0';
    goto out;
  }
  if (mkdirat(rootfd, gname, 0700)) {
    daemon__complain("skills: cannot create %s: %s (workers load skills/ as it is)", gen,
                     strerror(errno));
    db_exec(d, "DELETE FROM daemon_skill_gens WHERE gen = ?1", n, NULL, NULL);
    d->skills_gen[0] = '\0';
    goto out;
  }

  /* 1. copy what the loader would read from skills/ */
  size_t cap = 0;
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
  if (d->o.skills_probe(d->ws, gen, &bad, &e)) {
    /* e.g. luagent.lua does not load: the config reload says so; the
     * workers keep the generation they have */
    remove_generation(rootfd, gname);
    db_exec(d, "DELETE FROM daemon_skill_gens WHERE gen = ?1", n, NULL, NULL);
    goto out;
  }

  /* 3. a folder without its skill file is a removed skill; a folder whose
   * file does not load keeps its last good copy, and says so every time */
  kept = cJSON_CreateObject();
  for (cJSON *it = bad ? bad->child : NULL, *next; it; it = next) {
    next = it->next;
    const char *folder = it->string, *msg = cJSON_GetStringValue(it);
    char pf[4600], pb[4700], gf[4600];
    snprintf(pf, sizeof pf, "%s/%s", prev, folder);
    snprintf(pb, sizeof pb, "%s/.broken", pf);
    snprintf(gf, sizeof gf, "%s/%s", gen, folder);
    int good = prev[0] && is_dir(pf) && !exists(pb) && has_skill_file(pf);
    if (!has_skill_file(gf)) {
      rmdir(gf); /* workers do not see it at all */
      if (good)
        daemon__say(d, "skills/%s: removed (no skill.lua or SKILL.md in its folder); its tools are gone",
                    folder);
      cJSON_Delete(cJSON_DetachItemViaPointer(bad, it));
      continue;
    }
    if (good) {
      for (int k = 0; loaded_files[k]; k++) { /* gf is the folder made above */
        char p[4700];
        snprintf(p, sizeof p, "%s/%s", gf, loaded_files[k]);
        unlink(p);
      }
      copy_folder(pf, gf);
      cJSON_AddStringToObject(kept, folder, msg ? msg : "");
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
    else if (good)
      daemon__complain("skills/%s: still running its last good version; skills/%s does not load "
                       "(fix it, or delete skill.lua to remove the skill)",
                       folder, folder);
  }
  /* 4. fixed, changed, new and removed skills */
  for (size_t i = 0; i < nn; i++) {
    if (cJSON_GetObjectItemCaseSensitive(bad, names[i])) continue;
    char pf[4600], pb[4700], gf[4600];
    snprintf(pf, sizeof pf, "%s/%s", prev, names[i]);
    snprintf(pb, sizeof pb, "%s/.broken", pf);
    snprintf(gf, sizeof gf, "%s/%s", gen, names[i]);
    if (!is_dir(gf)) continue; /* removed above */
    if (cJSON_GetObjectItemCaseSensitive(d->skills_bad, names[i]))
      daemon__say(d, "skills/%s: fixed; the new version is loaded", names[i]);
    else if (!startup && prev[0] && (!is_dir(pf) || exists(pb)))
      daemon__say(d, "skills/%s: loaded", names[i]);
    else if (!startup && prev[0] && !same_folder(pf, gf))
      daemon__say(d, "skills/%s: reloaded", names[i]);
  }
  if (prev[0]) {
    int pfd = open(prev, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    char **pn = NULL;
    size_t npn = 0;
    if (pfd >= 0 && !list_at(pfd, &pn, &npn)) {
      for (size_t i = 0; i < npn; i++) {
        char pb[4700];
        snprintf(pb, sizeof pb, "%s/%s/.broken", prev, pn[i]);
        int still = 0;
        for (size_t k = 0; k < nn; k++) still |= !strcmp(pn[i], names[k]);
        if (!still && !exists(pb)) daemon__say(d, "skills/%s: removed (its folder is gone)", pn[i]);
      }
      free_names(pn, npn);
    }
    if (pfd >= 0) close(pfd);
  }

  /* 5. record it as made by this daemon, then drop the older ones */
  char h[65];
  const char *why;
  char *kj = cJSON_PrintUnformatted(kept);
  if (hash_generation(rootfd, gname, h, &why) ||
      db_exec(d, "UPDATE daemon_skill_gens SET hash = ?2, kept = ?3 WHERE gen = ?1", n, h, kj)) {
    free(kj);
    daemon__complain("skills: %s could not be recorded (workers load skills/ as it is)", gen);
    d->skills_gen[0] = '\0';
    goto out;
  }
  free(kj);
  cJSON_Delete(d->skills_bad);
  d->skills_bad = bad;
  bad = NULL;
  snprintf(d->skills_gen, sizeof d->skills_gen, "%s", gen);
  for (size_t i = 0; i < ng; i++) {
    if (gens[i] == n || gens[i] == last || !hashes[i]) continue;
    char nm[24];
    snprintf(nm, sizeof nm, "%ld", gens[i]);
    remove_generation(rootfd, nm);
    db_exec(d, "DELETE FROM daemon_skill_gens WHERE gen = ?1", gens[i], NULL, NULL);
  }
out:
  close(rootfd);
  cJSON_Delete(bad);
  cJSON_Delete(kept);
  free_names(names, nn);
  for (size_t i = 0; i < ng; i++) free(hashes[i]);
  free(hashes);
  free(gens);
}

/* schema.c - the JSON Schema subset used for tool parameters. */
#include "schema.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "json.h"
#include "util.h"

static const char *const known_types[] = {"object", "array", "string", "number",
                                          "integer", "boolean", "null", NULL};

static const char *json_type(const cJSON *v) {
  if (cJSON_IsObject(v)) return "object";
  if (cJSON_IsArray(v)) return "array";
  if (cJSON_IsString(v)) return "string";
  if (cJSON_IsNumber(v)) return v->valuedouble == floor(v->valuedouble) ? "integer" : "number";
  if (cJSON_IsBool(v)) return "boolean";
  return "null";
}

static int type_matches(const char *want, const cJSON *v) {
  const char *have = json_type(v);
  if (!strcmp(want, have)) return 1;
  if (!strcmp(want, "number") && !strcmp(have, "integer")) return 1;
  return 0;
}

/* The path to the value being checked, as a chain of parent links, so the
 * text ("args.items[2].id") is only formatted when something fails. */
struct vpath {
  const struct vpath *up;
  const char *key; /* object member, or NULL for an array index */
  int index;
};

static void path_format(const struct vpath *p, char *out, size_t n) {
  if (!p) {
    out[0] = 0;
    return;
  }
  path_format(p->up, out, n);
  size_t l = strlen(out);
  if (!p->up) snprintf(out + l, n - l, "%s", p->key ? p->key : "value");
  else if (p->key) snprintf(out + l, n - l, ".%s", p->key);
  else snprintf(out + l, n - l, "[%d]", p->index);
}

static int fail(struct err *e, const struct vpath *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(struct err *e, const struct vpath *path, const char *fmt, ...) {
  char msg[600], where[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  path_format(path, where, sizeof where);
  return err_set(e, ERR_INVALID, "invalid_args", "%s: %s", where, msg);
}

static int validate(const cJSON *s, const cJSON *v, const struct vpath *path, int depth, struct err *e);

static int check_type(const cJSON *s, const cJSON *v, const struct vpath *path, struct err *e) {
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
  if (!type) return 0;
  if (cJSON_IsString(type)) {
    if (!type_matches(type->valuestring, v))
      return fail(e, path, "expected %s, got %s", type->valuestring, json_type(v));
    return 0;
  }
  if (cJSON_IsArray(type)) {
    struct sbuf b = {0};
    for (const cJSON *t = type->child; t; t = t->next) {
      if (cJSON_IsString(t) && type_matches(t->valuestring, v)) {
        sbuf_free(&b);
        return 0;
      }
      if (cJSON_IsString(t)) sbuf_printf(&b, "%s%s", b.len ? " or " : "", t->valuestring);
    }
    int rc = fail(e, path, "expected %s, got %s", b.s ? b.s : "?", json_type(v));
    sbuf_free(&b);
    return rc;
  }
  return 0;
}

static int validate(const cJSON *s, const cJSON *v, const struct vpath *path, int depth, struct err *e) {
  if (depth > 64) return fail(e, path, "nested too deeply");
  if (!s || cJSON_IsTrue(s)) return 0;
  if (cJSON_IsFalse(s)) return fail(e, path, "no value is allowed here");
  if (!cJSON_IsObject(s)) return 0;
  int rc;
  if ((rc = check_type(s, v, path, e))) return rc;

  const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
  if (cJSON_IsArray(en)) {
    int ok = 0;
    for (const cJSON *x = en->child; x && !ok; x = x->next) ok = json_equal(x, v);
    if (!ok) {
      char *allowed = json_print(en, 0);
      rc = fail(e, path, "must be one of %s", allowed ? allowed : "the enum");
      cJSON_free(allowed);
      return rc;
    }
  }
  const cJSON *cst = cJSON_GetObjectItemCaseSensitive(s, "const");
  if (cst && !json_equal(cst, v)) return fail(e, path, "must equal the constant value");

  if (cJSON_IsNumber(v)) {
    double d = v->valuedouble;
    const cJSON *k;
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "minimum")) && cJSON_IsNumber(k) && d < k->valuedouble)
      return fail(e, path, "must be >= %g, got %g", k->valuedouble, d);
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "maximum")) && cJSON_IsNumber(k) && d > k->valuedouble)
      return fail(e, path, "must be <= %g, got %g", k->valuedouble, d);
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum")) && cJSON_IsNumber(k) && d <= k->valuedouble)
      return fail(e, path, "must be > %g, got %g", k->valuedouble, d);
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum")) && cJSON_IsNumber(k) && d >= k->valuedouble)
      return fail(e, path, "must be < %g, got %g", k->valuedouble, d);
  }
  if (cJSON_IsString(v)) {
    /* Length in characters (UTF-8 code points), as JSON Schema counts. */
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)v->valuestring; *p; p++)
      if ((*p & 0xC0) != 0x80) n++;
    const cJSON *k;
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "minLength")) && cJSON_IsNumber(k) && (double)n < k->valuedouble)
      return fail(e, path, "must be at least %d characters, got %zu", k->valueint, n);
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "maxLength")) && cJSON_IsNumber(k) && (double)n > k->valuedouble)
      return fail(e, path, "must be at most %d characters, got %zu", k->valueint, n);
  }
  if (cJSON_IsArray(v)) {
    int n = cJSON_GetArraySize(v);
    const cJSON *k;
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "minItems")) && cJSON_IsNumber(k) && n < k->valueint)
      return fail(e, path, "must have at least %d items, got %d", k->valueint, n);
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "maxItems")) && cJSON_IsNumber(k) && n > k->valueint)
      return fail(e, path, "must have at most %d items, got %d", k->valueint, n);
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    if (items) {
      int i = 0;
      for (const cJSON *x = v->child; x; x = x->next, i++) {
        struct vpath sub = {path, NULL, i};
        if ((rc = validate(items, x, &sub, depth + 1, e))) return rc;
      }
    }
  }
  if (cJSON_IsObject(v)) {
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
      if (cJSON_IsString(r) && !cJSON_GetObjectItemCaseSensitive(v, r->valuestring))
        return fail(e, path, "missing required field '%s'", r->valuestring);
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    for (const cJSON *x = v->child; x; x = x->next) {
      struct vpath sub = {path, x->string ? x->string : "?", 0};
      const cJSON *ps = props ? cJSON_GetObjectItemCaseSensitive(props, x->string) : NULL;
      if (ps) {
        if ((rc = validate(ps, x, &sub, depth + 1, e))) return rc;
      } else if (addl && cJSON_IsFalse(addl)) {
        return fail(e, path, "unexpected field '%s'", x->string ? x->string : "?");
      } else if (addl && cJSON_IsObject(addl)) {
        if ((rc = validate(addl, x, &sub, depth + 1, e))) return rc;
      }
    }
  }
  const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
  if (cJSON_IsArray(any)) {
    struct err first = {0};
    int ok = 0;
    for (const cJSON *x = any->child; x && !ok; x = x->next) {
      struct err tmp = {0};
      if (!validate(x, v, path, depth + 1, &tmp)) ok = 1;
      else if (!first.msg[0]) first = tmp;
    }
    if (!ok) return fail(e, path, "matches none of anyOf (first: %s)", first.msg);
  }
  const cJSON *one = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
  if (cJSON_IsArray(one)) {
    int count = 0;
    for (const cJSON *x = one->child; x; x = x->next) {
      struct err tmp = {0};
      if (!validate(x, v, path, depth + 1, &tmp)) count++;
    }
    if (count != 1) return fail(e, path, "must match exactly one of oneOf (matched %d)", count);
  }
  return 0;
}

int schema_validate(const cJSON *schema, const cJSON *value, const char *where, struct err *e) {
  struct vpath root = {NULL, where ? where : "value", 0};
  return validate(schema, value, &root, 0, e);
}

static int check(const cJSON *s, const char *where, int depth, struct err *e) {
  if (depth > 32) return err_set(e, ERR_INVALID, "invalid_schema", "%s: schema nested too deeply", where);
  if (cJSON_IsBool(s)) return 0;
  if (!cJSON_IsObject(s)) return err_set(e, ERR_INVALID, "invalid_schema", "%s: schema must be an object", where);
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
  if (type) {
    const cJSON *one = type, *list = cJSON_IsArray(type) ? type->child : NULL;
    for (const cJSON *t = list ? list : one; t; t = list ? t->next : NULL) {
      int ok = 0;
      for (int i = 0; cJSON_IsString(t) && known_types[i]; i++) ok |= !strcmp(t->valuestring, known_types[i]);
      if (!ok)
        return err_set(e, ERR_INVALID, "invalid_schema", "%s: unknown schema type %s", where,
                       cJSON_IsString(t) ? t->valuestring : "(not a string)");
      if (!list) break;
    }
  }
  const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
  if (props && !cJSON_IsObject(props))
    return err_set(e, ERR_INVALID, "invalid_schema", "%s: 'properties' must be an object", where);
  for (const cJSON *p = props ? props->child : NULL; p; p = p->next) {
    char sub[300];
    snprintf(sub, sizeof sub, "%s.%s", where, p->string);
    if (check(p, sub, depth + 1, e)) return ERR_INVALID;
  }
  const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
  if (req && !cJSON_IsArray(req) && !(cJSON_IsObject(req) && !req->child)) /* {} from Lua */
    return err_set(e, ERR_INVALID, "invalid_schema", "%s: 'required' must be a list of names", where);
  const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
  if (items && check(items, where, depth + 1, e)) return ERR_INVALID;
  return 0;
}

int schema_check(const cJSON *schema, const char *where, struct err *e) {
  if (!cJSON_IsObject(schema))
    return err_set(e, ERR_INVALID, "invalid_schema", "%s: parameter schema must be an object", where);
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type");
  if (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "object")))
    return err_set(e, ERR_INVALID, "invalid_schema", "%s: parameter schema must have type \"object\"", where);
  return check(schema, where, 0, e);
}

/* schema_num.c - exact number comparison for JSON Schema.
 *
 * A cJSON number is a double, plus (per the host's convention) the exact
 * decimal text in valuestring for an integer outside +-2^53. Two numbers
 * without text compare as doubles, exactly (no epsilon). When either has
 * text, both are turned into decimals (digits and a power of ten; a double
 * becomes its shortest round-trip text, so 0.3 is "3e-1", not
 * 0.299999999999999988898) and compared digit by digit.
 *
 * multipleOf divides those decimals exactly: x = X*10^a, m = M*10^b is a
 * multiple when X*10^(a-b) mod M == 0 (or X mod M*10^(b-a) == 0), done in
 * modular arithmetic so 1e308 against 0.123456789 needs no overflowing
 * division. So 0.3 is a multiple of 0.1, as a user means it, although
 * 0.3/0.1 is 2.9999999999999996 in doubles. Only when M does not fit 64
 * bits does it fall back to a relative tolerance on x/m.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema_impl.h"

#define DEC_MAX 1100 /* digits kept; longer texts are truncated (still ordered right) */

struct dec {
  int neg, zero;
  int nd;
  long exp; /* value = digits * 10^exp; digits have no leading or trailing zeros */
  char d[DEC_MAX];
};

static void dec_parse(const char *s, struct dec *o) {
  memset(o, 0, offsetof(struct dec, d));
  if (*s == '-')
    o->neg = 1, s++;
  else if (*s == '+')
    s++;
  long exp = 0;
  int seen_dot = 0, started = 0;
  for (; (*s >= '0' && *s <= '9') || *s == '.'; s++) {
    if (*s == '.') {
      seen_dot = 1;
      continue;
    }
    if (seen_dot) exp--;
    if (!started && *s == '0') continue;
    started = 1;
    if (o->nd < DEC_MAX)
      o->d[o->nd++] = *s;
    else if (!seen_dot)
      exp++; /* truncated integer digit keeps its magnitude */
  }
  if (*s == 'e' || *s == 'E') {
    long x = strtol(s + 1, NULL, 10);
    if (x > 1000000) x = 1000000;
    if (x < -1000000) x = -1000000;
    exp += x;
  }
  while (o->nd > 0 && o->d[o->nd - 1] == '0') o->nd--, exp++;
  o->exp = exp;
  if (!o->nd) o->zero = 1, o->neg = 0;
}

/* The shortest %.*e text that reads back as d. */
static void shortest(double d, const char *conv, char *out, size_t n) {
  for (int p = 1; p <= 17; p++) {
    snprintf(out, n, conv, p - 1 + (conv[3] == 'g'), d);
    if (strtod(out, NULL) == d) return;
  }
}

static void dec_of(const cJSON *a, struct dec *o) {
  if (a->valuestring && a->valuestring[0]) {
    dec_parse(a->valuestring, o);
    return;
  }
  char buf[48];
  shortest(a->valuedouble, "%.*e", buf, sizeof buf);
  dec_parse(buf, o);
}

static int dec_cmp(const struct dec *a, const struct dec *b) {
  if (a->zero || b->zero) {
    if (a->zero && b->zero) return 0;
    if (a->zero) return b->neg ? 1 : -1;
    return a->neg ? -1 : 1;
  }
  if (a->neg != b->neg) return a->neg ? -1 : 1;
  int sign = a->neg ? -1 : 1;
  long ma = a->nd + a->exp, mb = b->nd + b->exp; /* position of the leading digit */
  if (ma != mb) return ma < mb ? -sign : sign;
  int n = a->nd > b->nd ? a->nd : b->nd;
  for (int i = 0; i < n; i++) {
    char x = i < a->nd ? a->d[i] : '0', y = i < b->nd ? b->d[i] : '0';
    if (x != y) return x < y ? -sign : sign;
  }
  return 0;
}

static int has_text(const cJSON *a) {
  return a->valuestring && a->valuestring[0];
}

int schema__num_cmp(const cJSON *a, const cJSON *b) {
  if (!has_text(a) && !has_text(b)) {
    double x = a->valuedouble, y = b->valuedouble;
    return x < y ? -1 : x > y ? 1 : 0;
  }
  struct dec da, db;
  dec_of(a, &da);
  dec_of(b, &db);
  return dec_cmp(&da, &db);
}

int schema__num_eq(const cJSON *a, const cJSON *b) {
  return schema__num_cmp(a, b) == 0;
}

int schema__num_is_integer(const cJSON *a) {
  if (has_text(a)) {
    struct dec d;
    dec_parse(a->valuestring, &d);
    return d.zero || d.exp >= 0;
  }
  double x = a->valuedouble;
  return isfinite(x) && x == floor(x);
}

/* The digits as an integer, or 0 when they do not fit 64 bits. */
static int dec_u64(const struct dec *d, uint64_t *out) {
  uint64_t v = 0;
  for (int i = 0; i < d->nd; i++) {
    if (v > (UINT64_MAX - 9) / 10) return 0;
    v = v * 10 + (uint64_t)(d->d[i] - '0');
  }
  *out = v;
  return 1;
}

int schema__num_multiple(const cJSON *a, const cJSON *m) {
  double x = a->valuedouble, y = m->valuedouble;
  if (!has_text(a) && !has_text(m) && x == floor(x) && y == floor(y) && fabs(x) < 9.2e18 &&
      fabs(y) < 9.2e18 && y != 0)
    return (long long)x % (long long)y == 0;
  struct dec dx, dm;
  dec_of(a, &dx);
  dec_of(m, &dm);
  if (dx.zero) return 1;
  if (dm.zero) return 0;
  uint64_t mm;
  long k = dx.exp - dm.exp;
  if (dec_u64(&dm, &mm)) {
    unsigned __int128 D = mm;
    if (k < 0) {
      /* x = X*10^a, m = M*10^b with b > a: X must be a multiple of M*10^(b-a). */
      for (long i = 0; i < -k; i++) {
        D *= 10;
        if (D > UINT64_MAX) return 0; /* D > 10^19 > X's 17 digits, unless X is long text */
      }
      k = 0;
    }
    unsigned __int128 r = 0;
    for (int i = 0; i < dx.nd; i++) r = (r * 10 + (unsigned)(dx.d[i] - '0')) % D;
    for (long i = 0; i < k && r; i++) r = (r * 10) % D;
    return r == 0;
  }
  double q = x / y; /* relative tolerance only where the decimals are too long */
  if (!isfinite(q)) return 0;
  return fabs(q - nearbyint(q)) <= 4 * DBL_EPSILON * fabs(q);
}

void schema__num_text(const cJSON *a, char *out, size_t n) {
  if (has_text(a)) {
    snprintf(out, n, "%s", a->valuestring);
    return;
  }
  double d = a->valuedouble;
  if (d == floor(d) && fabs(d) < 1e15)
    snprintf(out, n, "%.0f", d); /* 10, not 1e+01 */
  else
    shortest(d, "%.*g", out, n);
}

int schema__json_equal(const cJSON *a, const cJSON *b) {
  if (!a || !b) return a == b;
  int ta = a->type & 0xFF, tb = b->type & 0xFF;
  if (ta != tb) return 0;
  switch (ta) {
    case cJSON_Number:
      return schema__num_eq(a, b);
    case cJSON_String:
    case cJSON_Raw:
      return !strcmp(a->valuestring ? a->valuestring : "", b->valuestring ? b->valuestring : "");
    case cJSON_Array: {
      const cJSON *x = a->child, *y = b->child;
      for (; x && y; x = x->next, y = y->next)
        if (!schema__json_equal(x, y)) return 0;
      return !x && !y;
    }
    case cJSON_Object: {
      int na = 0, nb = 0;
      for (const cJSON *x = a->child; x; x = x->next) na++;
      for (const cJSON *y = b->child; y; y = y->next) nb++;
      if (na != nb) return 0;
      for (const cJSON *x = a->child; x; x = x->next) {
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
        if (!y || !schema__json_equal(x, y)) return 0;
      }
      return 1;
    }
    default:
      return 1; /* null, true, false: same type is same value */
  }
}

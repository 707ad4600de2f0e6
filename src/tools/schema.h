/* schema.h - JSON Schema (draft 2020-12) validation for tool parameters.
 *
 * A schema is compiled once (schema_compile, when a tool is registered or
 * a skill loads) and then validated against on every call (schema_run).
 * Compiling checks the schema itself: a keyword luagent does not know, a
 * keyword whose value has the wrong type, a pattern the regex engine
 * cannot run exactly, or a $ref outside the document is refused, with an
 * error naming the keyword and the JSON pointer where it sits. Nothing is
 * silently ignored.
 *
 * Implemented: the core, applicator, unevaluated and validation
 * vocabularies of draft 2020-12 (type, enum, const, multipleOf, maximum,
 * exclusiveMaximum, minimum, exclusiveMinimum, maxLength, minLength,
 * pattern, maxItems, minItems, uniqueItems, maxContains, minContains,
 * contains, maxProperties, minProperties, required, dependentRequired,
 * dependentSchemas, properties, patternProperties, additionalProperties,
 * propertyNames, prefixItems, items, allOf, anyOf, oneOf, not, if/then/else,
 * unevaluatedProperties, unevaluatedItems, $ref, $defs, $anchor, $id,
 * $dynamicRef, $dynamicAnchor), boolean schemas, and the annotation
 * keywords (title, description, default, examples, deprecated, readOnly,
 * writeOnly, $comment, $schema, $vocabulary, content*).
 *
 * Numbers compare exactly: two doubles by value, and when either number
 * carries its exact decimal text (cJSON valuestring, for integers beyond
 * 2^53) by that text. multipleOf is exact for integers and for decimals
 * up to 17 significant digits (each number's shortest round-trip decimal
 * text is divided exactly); see schema.c.
 *
 * `format` is an annotation unless asserting is asked for, either with
 * SCHEMA_ASSERT_FORMAT or by the schema itself with a root keyword
 * "x-luagent-assert-format": true. Asserted formats: date-time, date,
 * time, duration, email, hostname, ipv4, ipv6, uri, uri-reference, uuid,
 * regex, json-pointer, relative-json-pointer, iri, iri-reference. Asserting
 * a format luagent does not know (idn-*, uri-template, ...) is refused at
 * compile.
 *
 * `pattern` and `patternProperties` use ECMA-262 syntax, translated to
 * POSIX extended regular expressions (run in the C.UTF-8 locale so a "."
 * is one code point). Constructs ERE cannot express exactly (lookaround,
 * backreferences, lazy quantifiers, \b, most \p{..}, flags) are refused
 * at compile time naming the construct. glibc's matcher slows down
 * steeply with expanded counted repetition, so a pattern whose {n,m}
 * repetitions add more than 256 elements is refused at compile time, and
 * a value longer than the matching budget allows for its pattern (about
 * 2e7 / pattern size bytes) fails with "is too long ... to match pattern"
 * rather than stall the host. Matching is linear in the value otherwise.
 *
 * Strings inside the host store U+0000 as the two bytes C0 80; length
 * keywords count that as one code point.
 *
 * Thread safety: a compiled schema is read-only while validating, so
 * several threads may run it at once.
 */
#ifndef LUAGENT_SCHEMA_H
#define LUAGENT_SCHEMA_H

#include <cjson/cJSON.h>

#include "err.h"

struct schema;

enum {
  /* Schemas from elsewhere (an MCP server): unknown keywords are reported
   * through on_unknown and ignored, as the specification allows; every
   * standard keyword is still enforced and still type-checked. */
  SCHEMA_LENIENT = 1u << 0,
  /* Assert `format` instead of treating it as an annotation. */
  SCHEMA_ASSERT_FORMAT = 1u << 1,
  /* Accept any root schema (a boolean, any type); without it the root
   * must be an object schema whose type, if given, is "object", as tool
   * parameters and delegate() answers are. */
  SCHEMA_ANY_ROOT = 1u << 2,
};

struct schema_opts {
  unsigned flags; /* SCHEMA_* */
  /* Called in lenient mode for each unknown keyword (its name and the
   * JSON pointer of the schema holding it); may be NULL. */
  void (*on_unknown)(void *ud, const char *keyword, const char *pointer);
  void *ud;
};

/* Compiles doc (borrowed: it must outlive *out and stay unchanged) into
 * *out. opts may be NULL (strict, tool-parameter root). where names the
 * schema in messages ("notes.add params"). Returns 0, or ERR_INVALID with
 * code "invalid_schema" and a message such as
 * `notes.add params: unknown keyword 'requried' at #/properties/title`,
 * and e->subject set to the keyword at fault ("requried"; empty when the
 * fault is not one keyword's).
 * The caller frees *out with schema_free. */
int schema_compile(const cJSON *doc, const struct schema_opts *opts, const char *where,
                   struct schema **out, struct err *e);
/* Validates value against a compiled schema. where names the root of the
 * instance path in messages ("args" gives "args.items[2].id: ..."). A
 * value that passes is checked without allocating unless the schema uses
 * pattern/patternProperties (glibc's regexec allocates), unevaluated* on
 * more than 64 members, or uniqueItems on more than 32 items. Returns 0,
 * or ERR_INVALID with code "invalid_args" and the first failure, e.g.
 * `args.path: does not match pattern "^[a-z]+$"`. */
int schema_run(const struct schema *s, const cJSON *value, const char *where, struct err *e);
/* Frees a compiled schema; NULL is a no-op. */
void schema_free(struct schema *s);

/* One-shot: compiles schema (strict, SCHEMA_ANY_ROOT), validates value,
 * frees. A schema that does not compile fails with code "invalid_schema".
 * For rare paths (a delegate() answer); tools keep a compiled schema. */
int schema_validate(const cJSON *schema, const cJSON *value, const char *where, struct err *e);
/* Checks that a tool parameter schema compiles (strict; root must be an
 * object schema). Same errors as schema_compile. */
int schema_check(const cJSON *schema, const char *where, struct err *e);

#endif

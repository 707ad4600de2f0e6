/* test_schema.c - JSON Schema draft 2020-12 for tool parameters.
 *
 * Table-driven: each row is a schema, an instance and the exact error
 * (NULL: valid). Every keyword has valid and invalid rows; numbers compare
 * exactly; $ref/$defs/$anchor/$dynamicRef, unevaluated*, format assertion;
 * then schemas refused when compiled, with their exact messages, and the
 * lenient mode for schemas from elsewhere. */
#include <stdlib.h>
#include <string.h>

#include "schema.h"
#include "test.h"
#include "util.h"

struct vcase {
  const char *schema;
  const char *value;
  const char *error; /* NULL: valid */
};

static const struct vcase cases[] = {
    /* type (integer: a number with zero fractional part) */
    {"{\"type\":\"integer\"}", "1.0", NULL},
    {"{\"type\":\"integer\"}", "1e300", NULL},
    {"{\"type\":\"integer\"}", "1.5", "args: expected integer, got number"},
    {"{\"type\":\"number\"}", "7", NULL},
    {"{\"type\":\"number\"}", "\"7\"", "args: expected number, got string"},
    {"{\"type\":[\"string\",\"null\"]}", "null", NULL},
    {"{\"type\":[\"string\",\"null\"]}", "3", "args: expected string or null, got integer"},
    {"{\"type\":\"object\"}", "[]", "args: expected object, got array"},
    /* {"type":"object"} alone (maybe with an empty properties) passes an
     * object without an evaluation; anything more is evaluated */
    {"{\"type\":\"object\"}", "{\"a\":[1,{\"b\":null}]}", NULL},
    {"{\"type\":\"object\",\"properties\":{}}", "{\"x\":1}", NULL},
    {"{\"type\":\"object\",\"properties\":{}}", "\"s\"", "args: expected object, got string"},
    {"{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}", "{\"x\":1}", "args: unexpected field 'x'"},
    {"{\"type\":\"object\",\"required\":[\"a\"]}", "{}", "args: missing required field 'a'"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}}", "{\"a\":1}", "args.a: expected string, got integer"},
    {"{\"maxProperties\":0,\"type\":\"object\"}", "{\"a\":1}", "args: must have at most 0 properties, got 1"},
    {"{\"type\":\"object\",\"properties\":{},\"not\":{}}", "{}", "args: must not match the 'not' schema"},
    {"{\"type\":\"object\",\"$ref\":\"#/$defs/x\",\"$defs\":{\"x\":{\"required\":[\"q\"]}}}", "{}", "args: missing required field 'q'"},
    {"{\"type\":\"array\"}", "{}", "args: expected array, got object"},
    {"{\"type\":\"boolean\"}", "0", "args: expected boolean, got integer"},
    {"{\"type\":\"null\"}", "false", "args: expected null, got boolean"},
    /* enum, const: deep equality, exact numbers, key order irrelevant */
    {"{\"enum\":[1,\"a\",{\"x\":[1]}]}", "{\"x\":[1.0]}", NULL},
    {"{\"enum\":[1,\"a\",{\"x\":[1]}]}", "2", "args: must be one of [1,\"a\",{\"x\":[1]}]"},
    {"{\"enum\":[false]}", "0", "args: must be one of [false]"},
    {"{\"const\":0.3}", "0.30000000000000004", "args: must equal the constant value"},
    {"{\"const\":0.3}", "0.3", NULL},
    {"{\"const\":9007199254740992}", "9007199254740991", "args: must equal the constant value"},
    {"{\"const\":1}", "1.0", NULL},
    {"{\"const\":{\"a\":1,\"b\":[true,null]}}", "{\"b\":[true,null],\"a\":1}", NULL},
    {"{\"const\":{\"a\":1}}", "{\"a\":1,\"b\":2}", "args: must equal the constant value"},
    {"{\"const\":[1,2]}", "[2,1]", "args: must equal the constant value"},
    {"{\"const\":null}", "false", "args: must equal the constant value"},
    /* multipleOf: exact for integers and short decimals */
    {"{\"multipleOf\":2}", "10", NULL},
    {"{\"multipleOf\":2}", "7", "args: must be a multiple of 2, got 7"},
    {"{\"multipleOf\":0.1}", "0.3", NULL},
    {"{\"multipleOf\":0.1}", "0.35", "args: must be a multiple of 0.1, got 0.35"},
    {"{\"multipleOf\":0.0001}", "0.0075", NULL},
    {"{\"multipleOf\":1.5}", "35", "args: must be a multiple of 1.5, got 35"},
    {"{\"multipleOf\":0.123456789}", "1e308",
     "args: must be a multiple of 0.123456789, got 1e+308"},
    {"{\"multipleOf\":1e-8}", "12391239123", NULL},
    {"{\"multipleOf\":3}", "\"x\"", NULL},
    /* bounds */
    {"{\"minimum\":0}", "0", NULL},
    {"{\"minimum\":0}", "-1", "args: must be >= 0, got -1"},
    {"{\"maximum\":2.5}", "2.5", NULL},
    {"{\"maximum\":2.5}", "2.6", "args: must be <= 2.5, got 2.6"},
    {"{\"exclusiveMinimum\":0}", "0.001", NULL},
    {"{\"exclusiveMinimum\":0}", "0", "args: must be > 0, got 0"},
    {"{\"exclusiveMaximum\":10}", "9", NULL},
    {"{\"exclusiveMaximum\":10}", "10", "args: must be < 10, got 10"},
    {"{\"maximum\":9007199254740991}", "9007199254740992",
     "args: must be <= 9007199254740991, got 9007199254740992"},
    /* lengths count code points; the host's U+0000 (C0 80) is one */
    {"{\"minLength\":2}", "\"\xc3\xa9\"", "args: must be at least 2 characters, got 1"},
    {"{\"minLength\":2}", "\"ab\"", NULL},
    {"{\"maxLength\":2}", "\"\xf0\x9f\x98\x80\xc3\xa9\"", NULL},
    {"{\"maxLength\":2}", "\"abc\"", "args: must be at most 2 characters, got 3"},
    {"{\"maxLength\":1.0}", "\"a\"", NULL},
    /* pattern: ECMA-262, an unanchored search */
    {"{\"pattern\":\"^[a-z]+$\"}", "\"../../etc\"", "args: does not match pattern \"^[a-z]+$\""},
    {"{\"pattern\":\"^[a-z]+$\"}", "\"abc\"", NULL},
    {"{\"pattern\":\"b\"}", "\"abc\"", NULL},
    {"{\"pattern\":\"^\\\\d{3}$\"}", "\"123\"", NULL},
    {"{\"pattern\":\"^\\\\d{3}$\"}", "\"12a\"", "args: does not match pattern \"^\\d{3}$\""},
    {"{\"pattern\":\"^\\\\w+\\\\s\\\\S$\"}", "\"a_1 x\"", NULL},
    {"{\"pattern\":\"^\\\\W\"}", "\"a\"", "args: does not match pattern \"^\\W\""},
    {"{\"pattern\":\"^(?:ab)+$\"}", "\"abab\"", NULL},
    {"{\"pattern\":\"^[\\\\]\\\\-a]+$\"}", "\"]-a\"", NULL},
    {"{\"pattern\":\"^[\\\\]\\\\-a]+$\"}", "\"b\"",
     "args: does not match pattern \"^[\\]\\-a]+$\""},
    {"{\"pattern\":\"^a.c$\"}", "\"a\\nc\"", "args: does not match pattern \"^a.c$\""},
    {"{\"pattern\":\"^a.c$\"}",
     "\"a\xc3\xa9"
     "c\"",
     NULL},
    {"{\"pattern\":\"^\\\\p{L}+$\"}", "\"\xcf\x80x\"", NULL},
    {"{\"pattern\":\"a{2}\"}", "\"ba\"", "args: does not match pattern \"a{2}\""},
    {"{\"pattern\":\"^\\\\.\\\\/\\\\u0041$\"}", "\"./A\"", NULL},
    {"{\"pattern\":\"x\"}", "5", NULL},
    {"{\"pattern\":\"^[\\u00e0-\\u00ff]+$\"}", "\"\xc3\xa0\xc3\xa9\"", NULL},
    {"{\"pattern\":\"^[\\u00e0-\\u00ff]+$\"}", "\"a\"",
     "args: does not match pattern \"^[\xc3\xa0-\xc3\xbf]+$\""},
    {"{\"pattern\":\"^\\\\s$\"}", "\"\xc2\xa0\"", NULL},
    {"{\"pattern\":\"^[^\\\\d]$\"}", "\"7\"", "args: does not match pattern \"^[^\\d]$\""},
    {"{\"pattern\":\"^[^\\\\d]$\"}", "\"x\"", NULL},
    {"{\"pattern\":\"^[\\\\w.-]+@\"}", "\"a.b-c@\"", NULL},
    {"{\"pattern\":\"^a|b$\"}", "\"xb\"", NULL},
    {"{\"pattern\":\"^(a|b){2,3}$\"}", "\"abab\"", "args: does not match pattern \"^(a|b){2,3}$\""},
    {"{\"pattern\":\"^x{$\"}", "\"x{\"", NULL},
    {"{\"pattern\":\"^((a|b){3}c){10}$\"}", "\"aaaaaaaaaac\"",
     "args: does not match pattern \"^((a|b){3}c){10}$\""},
    {"{\"pattern\":\"^[]$\"}", "\"\"", "args: does not match pattern \"^[]$\""},
    {"{\"pattern\":\"^[^]$\"}", "\"\\n\"", NULL},
    {"{\"pattern\":\"^[\\\\d-z]+$\"}", "\"1-z\"", NULL},
    {"{\"pattern\":\"^\\\\cJ$\"}", "\"\\n\"", NULL},
    /* arrays: prefixItems, items, min/maxItems, uniqueItems, contains */
    {"{\"prefixItems\":[{\"type\":\"string\"}],\"items\":{\"type\":\"integer\"}}", "[\"a\",1,2]",
     NULL},
    {"{\"prefixItems\":[{\"type\":\"string\"}],\"items\":{\"type\":\"integer\"}}", "[\"a\",\"b\"]",
     "args[1]: expected integer, got string"},
    {"{\"prefixItems\":[{\"type\":\"string\"}],\"items\":{\"type\":\"integer\"}}", "[1]",
     "args[0]: expected string, got integer"},
    {"{\"prefixItems\":[{}],\"items\":false}", "[1,2]", "args: unexpected item [1]"},
    {"{\"items\":{\"type\":\"object\",\"required\":[\"id\"]}}", "[{\"id\":1},{}]",
     "args[1]: missing required field 'id'"},
    {"{\"minItems\":1}", "[]", "args: must have at least 1 items, got 0"},
    {"{\"maxItems\":1}", "[1,2]", "args: must have at most 1 items, got 2"},
    {"{\"uniqueItems\":true}", "[1,2]", NULL},
    {"{\"uniqueItems\":true}", "[1,1.0]", "args: items [0] and [1] are equal, must be unique"},
    {"{\"uniqueItems\":true}", "[{\"a\":1,\"b\":2},{\"b\":2,\"a\":1}]",
     "args: items [0] and [1] are equal, must be unique"},
    {"{\"uniqueItems\":true}", "[[1],[true]]", NULL},
    {"{\"uniqueItems\":false}", "[1,1]", NULL},
    {"{\"contains\":{\"type\":\"string\"}}", "[1,\"a\"]", NULL},
    {"{\"contains\":{\"type\":\"string\"}}", "[1,2]",
     "args: must contain at least 1 item(s) matching 'contains', got 0"},
    {"{\"contains\":{\"const\":1},\"minContains\":2}", "[1,2,1]", NULL},
    {"{\"contains\":{\"const\":1},\"minContains\":2}", "[1,2]",
     "args: must contain at least 2 item(s) matching 'contains', got 1"},
    {"{\"contains\":{\"const\":1},\"maxContains\":1}", "[1,1]",
     "args: must contain at most 1 item(s) matching 'contains', got 2"},
    {"{\"contains\":{\"const\":1},\"minContains\":0}", "[]", NULL},
    {"{\"minContains\":2}", "[]", NULL},
    /* objects */
    {"{\"minProperties\":1}", "{}", "args: must have at least 1 properties, got 0"},
    {"{\"maxProperties\":1}", "{\"a\":1,\"b\":2}", "args: must have at most 1 properties, got 2"},
    {"{\"maxProperties\":1}", "{\"a\":1}", NULL},
    {"{\"required\":[\"a\"]}", "{}", "args: missing required field 'a'"},
    {"{\"required\":[\"a\"]}", "{\"a\":null}", NULL},
    {"{\"dependentRequired\":{\"a\":[\"b\"]}}", "{\"a\":1}", "args: field 'a' requires field 'b'"},
    {"{\"dependentRequired\":{\"a\":[\"b\"]}}", "{\"b\":1}", NULL},
    {"{\"dependentSchemas\":{\"a\":{\"required\":[\"c\"]}}}", "{\"a\":1}",
     "args: missing required field 'c'"},
    {"{\"dependentSchemas\":{\"a\":{\"required\":[\"c\"]}}}", "{\"b\":1}", NULL},
    {"{\"properties\":{\"a\":{\"properties\":{\"b\":{\"type\":\"string\"}}}}}", "{\"a\":{\"b\":1}}",
     "args.a.b: expected string, got integer"},
    {"{\"properties\":{\"a\":{\"type\":\"string\"}},\"additionalProperties\":false}",
     "{\"a\":\"x\",\"extra\":1}", "args: unexpected field 'extra'"},
    {"{\"patternProperties\":{\"^x-\":{\"type\":\"integer\"}},\"additionalProperties\":false}",
     "{\"x-a\":1}", NULL},
    {"{\"patternProperties\":{\"^x-\":{\"type\":\"integer\"}},\"additionalProperties\":false}",
     "{\"x-a\":\"s\"}", "args.x-a: expected integer, got string"},
    {"{\"patternProperties\":{\"^x-\":{}},\"additionalProperties\":false}", "{\"y\":1}",
     "args: unexpected field 'y'"},
    {"{\"properties\":{\"a\":{}},\"additionalProperties\":{\"type\":\"string\"}}",
     "{\"a\":1,\"b\":2}", "args.b: expected string, got integer"},
    {"{\"propertyNames\":{\"pattern\":\"^[a-z]+$\"}}", "{\"ab\":1}", NULL},
    {"{\"propertyNames\":{\"pattern\":\"^[a-z]+$\"}}", "{\"A\":1}",
     "args: invalid property name 'A': does not match pattern \"^[a-z]+$\""},
    {"{\"propertyNames\":{\"maxLength\":2}}", "{\"abc\":1}",
     "args: invalid property name 'abc': must be at most 2 characters, got 3"},
    /* combinators */
    {"{\"allOf\":[{\"type\":\"integer\"},{\"minimum\":2}]}", "3", NULL},
    {"{\"allOf\":[{\"type\":\"integer\"},{\"minimum\":2}]}", "1", "args: must be >= 2, got 1"},
    {"{\"anyOf\":[{\"type\":\"string\"},{\"minimum\":2}]}", "3", NULL},
    {"{\"anyOf\":[{\"type\":\"string\"},{\"minimum\":2}]}", "1",
     "args: matches none of anyOf (first: args: expected string, got integer)"},
    {"{\"oneOf\":[{\"type\":\"integer\"},{\"minimum\":2}]}", "1", NULL},
    {"{\"oneOf\":[{\"type\":\"integer\"},{\"minimum\":2}]}", "3",
     "args: must match exactly one of oneOf (matched 2)"},
    {"{\"oneOf\":[{\"type\":\"integer\"},{\"minimum\":2}]}", "1.5",
     "args: must match exactly one of oneOf (matched 0)"},
    {"{\"not\":{\"type\":\"string\"}}", "1", NULL},
    {"{\"not\":{\"type\":\"string\"}}", "\"s\"", "args: must not match the 'not' schema"},
    {"{\"if\":{\"properties\":{\"k\":{\"const\":\"a\"}}},\"then\":{\"required\":[\"x\"]},\"else\":{"
     "\"required\":[\"y\"]}}",
     "{\"k\":\"a\",\"x\":1}", NULL},
    {"{\"if\":{\"properties\":{\"k\":{\"const\":\"a\"}}},\"then\":{\"required\":[\"x\"]},\"else\":{"
     "\"required\":[\"y\"]}}",
     "{\"k\":\"a\"}", "args: missing required field 'x'"},
    {"{\"if\":{\"properties\":{\"k\":{\"const\":\"a\"}}},\"then\":{\"required\":[\"x\"]},\"else\":{"
     "\"required\":[\"y\"]}}",
     "{\"k\":\"b\"}", "args: missing required field 'y'"},
    {"{\"then\":false}", "1", NULL},
    /* boolean schemas */
    {"true", "{\"anything\":[1]}", NULL},
    {"false", "1", "args: no value is allowed here"},
    {"{\"properties\":{\"a\":false}}", "{\"a\":1}", "args.a: no value is allowed here"},
    /* unevaluated*, with annotations across in-place applicators */
    {"{\"allOf\":[{\"properties\":{\"a\":{}}}],\"unevaluatedProperties\":false}", "{\"a\":1}",
     NULL},
    {"{\"allOf\":[{\"properties\":{\"a\":{}}}],\"unevaluatedProperties\":false}",
     "{\"a\":1,\"b\":2}", "args: unexpected field 'b'"},
    {"{\"anyOf\":[{\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"]},{"
     "\"properties\":{\"b\":{}},\"required\":[\"b\"]}],"
     "\"unevaluatedProperties\":false}",
     "{\"a\":1,\"b\":2}", "args: unexpected field 'a'"},
    {"{\"if\":{\"properties\":{\"a\":{\"const\":1}}},\"then\":{\"properties\":{\"b\":{}}},"
     "\"unevaluatedProperties\":false}",
     "{\"a\":1,\"b\":2}", NULL},
    {"{\"if\":{\"properties\":{\"a\":{\"const\":1}}},\"then\":{\"properties\":{\"b\":{}}},"
     "\"unevaluatedProperties\":false}",
     "{\"a\":2,\"b\":2}", "args: unexpected field 'a'"},
    {"{\"$defs\":{\"d\":{\"properties\":{\"a\":{}}}},\"$ref\":\"#/$defs/"
     "d\",\"unevaluatedProperties\":{\"type\":\"string\"}}",
     "{\"a\":1,\"b\":2}", "args.b: expected string, got integer"},
    {"{\"dependentSchemas\":{\"a\":{\"properties\":{\"b\":{}}}},\"properties\":{\"a\":{}},"
     "\"unevaluatedProperties\":false}",
     "{\"a\":1,\"b\":2}", NULL},
    {"{\"not\":{\"not\":{\"properties\":{\"a\":{}}}},\"unevaluatedProperties\":false}", "{\"a\":1}",
     "args: unexpected field 'a'"},
    {"{\"properties\":{\"o\":{\"unevaluatedProperties\":false}},\"unevaluatedProperties\":false}",
     "{\"o\":{}}", NULL},
    {"{\"prefixItems\":[{}],\"unevaluatedItems\":false}", "[1]", NULL},
    {"{\"prefixItems\":[{}],\"unevaluatedItems\":false}", "[1,2]", "args: unexpected item [1]"},
    {"{\"allOf\":[{\"prefixItems\":[{},{}]}],\"unevaluatedItems\":false}", "[1,2]", NULL},
    {"{\"contains\":{\"type\":\"string\"},\"unevaluatedItems\":{\"type\":\"integer\"}}",
     "[\"a\",1]", NULL},
    {"{\"contains\":{\"type\":\"string\"},\"unevaluatedItems\":{\"type\":\"integer\"}}",
     "[\"a\",true]", "args[1]: expected integer, got boolean"},
    {"{\"anyOf\":[{\"prefixItems\":[{\"const\":1}]},{\"prefixItems\":[{},{\"const\":2}]}],"
     "\"unevaluatedItems\":false}",
     "[1,3]", "args: unexpected item [1]"},
    /* $ref, $defs, JSON pointers with ~0 ~1 and percent-encoding */
    {"{\"$defs\":{\"pos\":{\"type\":\"integer\",\"minimum\":0}},\"properties\":{\"n\":{\"$ref\":\"#"
     "/$defs/pos\"}}}",
     "{\"n\":-1}", "args.n: must be >= 0, got -1"},
    {"{\"$defs\":{\"a/"
     "b\":{\"type\":\"string\"},\"c~d\":{\"type\":\"integer\"},\"e%f\":{\"type\":\"null\"}},"
     "\"properties\":{\"x\":{\"$ref\":\"#/$defs/a~1b\"},\"y\":{\"$ref\":\"#/$defs/"
     "c~0d\"},\"z\":{\"$ref\":\"#/$defs/e%25f\"}}}",
     "{\"x\":\"s\",\"y\":1,\"z\":null}", NULL},
    {"{\"$defs\":{\"a/"
     "b\":{\"type\":\"string\"},\"c~d\":{\"type\":\"integer\"},\"e%f\":{\"type\":\"null\"}},"
     "\"properties\":{\"x\":{\"$ref\":\"#/$defs/a~1b\"},\"y\":{\"$ref\":\"#/$defs/"
     "c~0d\"},\"z\":{\"$ref\":\"#/$defs/e%25f\"}}}",
     "{\"z\":0}", "args.z: expected null, got integer"},
    {"{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"$ref\":\"#/properties/a\"}}}",
     "{\"b\":\"x\"}", "args.b: expected integer, got string"},
    {"{\"type\":\"object\",\"properties\":{\"child\":{\"$ref\":\"#\"},\"v\":{\"type\":\"integer\"}}"
     "}",
     "{\"child\":{\"child\":{\"v\":\"deep\"}}}",
     "args.child.child.v: expected integer, got string"},
    {"{\"$defs\":{\"x\":{\"$anchor\":\"name\",\"type\":\"string\"}},\"$ref\":\"#name\"}", "1",
     "args: expected string, got integer"},
    {"{\"$id\":\"http://x.test/"
     "root.json\",\"$defs\":{\"o\":{\"$id\":\"other.json\",\"type\":\"integer\"}},\"$ref\":\"other."
     "json\"}",
     "\"a\"", "args: expected integer, got string"},
    {"{\"$id\":\"http://x.test/a/root.json\",\"$defs\":{\"o\":{\"$id\":\"../b/"
     "o.json\",\"$defs\":{\"i\":{\"$anchor\":\"i\",\"type\":\"null\"}}}},"
     "\"$ref\":\"http://x.test/b/o.json#i\"}",
     "1", "args: expected null, got integer"},
    /* $dynamicRef: the outermost $dynamicAnchor in the dynamic scope wins */
    {"{\"$id\":\"https://x.test/"
     "strict\",\"$ref\":\"list\",\"$defs\":{\"item\":{\"$dynamicAnchor\":\"item\",\"type\":"
     "\"string\"},"
     "\"list\":{\"$id\":\"list\",\"type\":\"array\",\"items\":{\"$dynamicRef\":\"#item\"},\"$"
     "defs\":{\"any\":{\"$dynamicAnchor\":\"item\"}}}}}",
     "[\"a\",1]", "args[1]: expected string, got integer"},
    {"{\"$id\":\"https://x.test/loose\",\"$ref\":\"list\",\"$defs\":{"
     "\"list\":{\"$id\":\"list\",\"type\":\"array\",\"items\":{\"$dynamicRef\":\"#item\"},\"$"
     "defs\":{\"any\":{\"$dynamicAnchor\":\"item\"}}}}}",
     "[\"a\",1]", NULL},
    /* format is an annotation unless asserted */
    {"{\"format\":\"email\"}", "\"nope\"", NULL},
    {"{\"x-luagent-assert-format\":true,\"format\":\"email\"}", "\"nope\"",
     "args: is not a valid email"},
    {"{\"x-luagent-assert-format\":true,\"format\":\"email\"}", "\"a.b@example.com\"", NULL},
    /* annotation keywords are accepted */
    {"{\"$schema\":\"https://json-schema.org/draft/2020-12/"
     "schema\",\"title\":\"t\",\"description\":\"d\",\"default\":1,"
     "\"examples\":[1],\"deprecated\":false,\"readOnly\":false,\"writeOnly\":false,\"$comment\":"
     "\"c\","
     "\"contentMediaType\":\"application/"
     "json\",\"contentEncoding\":\"base64\",\"contentSchema\":{\"type\":\"object\"}}",
     "\"not base64 at all\"", NULL},
};

static void test_cases(void) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const struct vcase *c = &cases[i];
    cJSON *s = cJSON_Parse(c->schema), *v = cJSON_Parse(c->value);
    if (!s || !v) {
      fprintf(stderr, "case %zu: bad test JSON\n", i);
      test_failures_++;
      continue;
    }
    struct schema *cs = NULL;
    struct err e = {0};
    struct schema_opts o = {SCHEMA_ANY_ROOT, NULL, NULL};
    int rc = schema_compile(s, &o, "t", &cs, &e);
    if (rc) {
      fprintf(stderr, "case %zu (%s): does not compile: %s\n", i, c->schema, e.msg);
      test_failures_++;
    } else {
      memset(&e, 0, sizeof e);
      rc = schema_run(cs, v, "args", &e);
      if (c->error) {
        CHECK_INT(rc, ERR_INVALID);
        CHECK_STR(e.code, "invalid_args");
        if (!e.msg[0] || strcmp(e.msg, c->error))
          fprintf(stderr, "  in case %zu: %s against %s\n", i, c->schema, c->value);
        CHECK_STR(e.msg, c->error);
      } else {
        if (rc) fprintf(stderr, "  case %zu: %s against %s: %s\n", i, c->schema, c->value, e.msg);
        CHECK_INT(rc, 0);
      }
    }
    schema_free(cs);
    cJSON_Delete(s);
    cJSON_Delete(v);
  }
}

/* A number node carrying its exact decimal text, as the host's JSON
 * parser and Lua bridge make for integers beyond 2^53. */
static cJSON *big(const char *text) {
  cJSON *n = cJSON_CreateNumber(strtod(text, NULL));
  n->valuestring = strdup(text);
  return n;
}

static void test_exact_big_integers(void) {
  /* 2^53+1 and 2^53 are the same double; the text tells them apart. */
  cJSON *s = cJSON_CreateObject();
  cJSON_AddItemToObject(s, "const", big("9007199254740993"));
  struct schema *cs;
  struct err e = {0};
  struct schema_opts o = {SCHEMA_ANY_ROOT, NULL, NULL};
  CHECK_INT(schema_compile(s, &o, "t", &cs, &e), 0);
  cJSON *v = big("9007199254740992");
  CHECK_INT(schema_run(cs, v, "args", &e), ERR_INVALID);
  CHECK_STR(e.msg, "args: must equal the constant value");
  cJSON_Delete(v);
  v = big("9007199254740993");
  CHECK_INT(schema_run(cs, v, "args", &e), 0);
  cJSON_Delete(v);
  v = cJSON_CreateNumber(9007199254740992.0); /* a plain double 2^53 */
  CHECK_INT(schema_run(cs, v, "args", &e), ERR_INVALID);
  cJSON_Delete(v);
  schema_free(cs);
  cJSON_Delete(s);

  s = cJSON_Parse("{\"maximum\": 18446744073709551615, \"type\": \"integer\"}");
  cJSON_ReplaceItemInObject(s, "maximum", big("18446744073709551615"));
  CHECK_INT(schema_compile(s, &o, "t", &cs, &e), 0);
  v = big("18446744073709551616");
  CHECK_INT(schema_run(cs, v, "args", &e), ERR_INVALID);
  CHECK_STR(e.msg, "args: must be <= 18446744073709551615, got 18446744073709551616");
  cJSON_Delete(v);
  v = big("18446744073709551615");
  CHECK_INT(schema_run(cs, v, "args", &e), 0);
  cJSON_Delete(v);
  schema_free(cs);
  cJSON_Delete(s);
}

/* The host stores U+0000 as C0 80; it is one character. */
static void test_nul_pattern(void) {
  cJSON *s = cJSON_Parse("{\"pattern\":\"^a.b$\"}");
  struct schema *cs;
  struct err e = {0};
  struct schema_opts o = {SCHEMA_ANY_ROOT, NULL, NULL};
  CHECK_INT(schema_compile(s, &o, "t", &cs, &e), 0);
  cJSON *v = cJSON_CreateString(
      "a\xC0\x80"
      "b"); /* U+0000 is one character for "." */
  CHECK_INT(schema_run(cs, v, "args", &e), 0);
  cJSON_Delete(v);
  v = cJSON_CreateString(
      "a\xC0\x80\xC0\x80"
      "b");
  CHECK_INT(schema_run(cs, v, "args", &e), ERR_INVALID);
  cJSON_Delete(v);
  schema_free(cs);
  cJSON_Delete(s);
  s = cJSON_Parse("{\"pattern\":\"^[^b]*b$\"}");
  CHECK_INT(schema_compile(s, &o, "t", &cs, &e), 0);
  v = cJSON_CreateString(
      "\xC0\x80"
      "ab");
  CHECK_INT(schema_run(cs, v, "args", &e), 0); /* the zero byte does not end the string */
  cJSON_Delete(v);
  schema_free(cs);
  cJSON_Delete(s);
}

static void test_nul_length(void) {
  cJSON *s = cJSON_Parse("{\"maxLength\":2,\"minLength\":2}");
  struct schema *cs;
  struct err e = {0};
  struct schema_opts o = {SCHEMA_ANY_ROOT, NULL, NULL};
  CHECK_INT(schema_compile(s, &o, "t", &cs, &e), 0);
  cJSON *v = cJSON_CreateString("a\xC0\x80");
  CHECK_INT(schema_run(cs, v, "args", &e), 0);
  cJSON_Delete(v);
  v = cJSON_CreateString("a\xC0\x80\xC0\x80");
  CHECK_INT(schema_run(cs, v, "args", &e), ERR_INVALID);
  CHECK_STR(e.msg, "args: must be at most 2 characters, got 3");
  cJSON_Delete(v);
  schema_free(cs);
  cJSON_Delete(s);
}

struct fcase {
  const char *format, *good, *bad;
};

static void test_formats_asserted(void) {
  static const struct fcase f[] = {
      {"date-time", "2024-02-29T23:59:60Z", "2023-02-29T10:00:00Z"},
      {"date-time", "1985-04-12T23:20:50.52+01:00", "1985-04-12 23:20:50Z"},
      {"date", "2024-02-29", "2024-13-01"},
      {"time", "08:30:06.283185Z", "25:00:00Z"},
      {"time", "23:59:60+00:00", "22:59:60+00:00"},
      {"email", "joe.bloggs@example.com", "joe..bloggs@example.com"},
      {"email", "x@[127.0.0.1]", "@example.com"},
      {"ipv4", "192.168.0.1", "192.168.0.01"},
      {"ipv4", "0.0.0.0", "256.1.1.1"},
      {"ipv6", "::1", "12345::"},
      {"ipv6", "fe80::1:2", "fe80::1%eth0"},
      {"uri", "https://example.com/a?b=c#d", "//example.com/no-scheme"},
      {"uri", "urn:isbn:0451450523", "http://exa mple.com"},
      {"uuid", "2eb8aa08-aa98-11ea-b4aa-73b441d16380", "2eb8aa08-aa98-11ea-b4aa-73b441d1638"},
      {"hostname", "www.example.com", "-bad.example.com"},
      {"duration", "P1Y2M3DT4H5M6S", "P1H"},
      {"uri-reference", "../a/b#c", "a b"},
      {"json-pointer", "/a~1b/0", "a/b"},
      {"regex", "^[a-z]+$", "(?<=a)b"},
      {"relative-json-pointer", "1/a", "01/a"},
      {"iri", "http://\xc3\xa9x.test/\xc3\xa9", "\xc3\xa9x.test"},
      {"iri-reference", "\xc3\xa9/x", "a b"},
      {"uri", "http://[::1]:8080/", "http://x.test:80a/"},
  };
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "format", f[i].format);
    struct schema *cs;
    struct err e = {0};
    struct schema_opts o = {SCHEMA_ANY_ROOT | SCHEMA_ASSERT_FORMAT, NULL, NULL};
    CHECK_INT(schema_compile(s, &o, "t", &cs, &e), 0);
    cJSON *good = cJSON_CreateString(f[i].good), *bad = cJSON_CreateString(f[i].bad);
    int rg = schema_run(cs, good, "args", &e);
    if (rg) fprintf(stderr, "  format %s: '%s' refused: %s\n", f[i].format, f[i].good, e.msg);
    CHECK_INT(rg, 0);
    int rb = schema_run(cs, bad, "args", &e);
    if (!rb) fprintf(stderr, "  format %s: '%s' accepted\n", f[i].format, f[i].bad);
    CHECK_INT(rb, ERR_INVALID);
    char want[128];
    snprintf(want, sizeof want, "args: is not a valid %s", f[i].format);
    CHECK_STR(e.msg, want);
    cJSON_Delete(good);
    cJSON_Delete(bad);
    schema_free(cs);
    cJSON_Delete(s);
  }
}

struct rcase {
  const char *schema;
  const char *error;
  const char *subject; /* the keyword named in e.subject */
};

/* Refused when the tool loads (strict, tool-parameter root). */
static const struct rcase refused[] = {
    {"[]", "t: parameter schema must be an object", ""},
    {"{\"type\":\"string\"}", "t: parameter schema must have type \"object\"", ""},
    {"{\"type\":\"object\",\"requried\":[\"a\"]}", "t: unknown keyword 'requried' at #",
     "requried"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"patern\":\"x\"}}}",
     "t: unknown keyword 'patern' at #/properties/a", "patern"},
    {"{\"properties\":{\"a/b\":{\"definitions\":{}}}}",
     "t: unknown keyword 'definitions' at #/properties/a~1b", "definitions"},
    {"{\"properties\":{\"a\":{\"minLength\":\"3\"}}}",
     "t: 'minLength' must be a non-negative integer at #/properties/a", "minLength"},
    {"{\"properties\":{\"a\":{\"minLength\":-1}}}",
     "t: 'minLength' must be a non-negative integer at #/properties/a", "minLength"},
    {"{\"properties\":{\"a\":{\"maxItems\":1.5}}}",
     "t: 'maxItems' must be a non-negative integer at #/properties/a", "maxItems"},
    {"{\"properties\":{\"a\":{\"multipleOf\":0}}}",
     "t: 'multipleOf' must be a number greater than 0 at #/properties/a", "multipleOf"},
    {"{\"properties\":{\"a\":{\"maximum\":\"9\"}}}",
     "t: 'maximum' must be a number at #/properties/a", "maximum"},
    {"{\"properties\":{\"a\":{\"pattern\":\"(?=a)b\"}}}",
     "t: 'pattern' \"(?=a)b\" cannot be used: lookahead and lookbehind are not supported at "
     "#/properties/a",
     "pattern"},
    {"{\"properties\":{\"a\":{\"pattern\":\"a+?\"}}}",
     "t: 'pattern' \"a+?\" cannot be used: lazy quantifiers (*? +? ?? {n,m}?) are not supported at "
     "#/properties/a",
     "pattern"},
    {"{\"properties\":{\"a\":{\"pattern\":\"(a\"}}}",
     "t: 'pattern' \"(a\" cannot be used: an unterminated group at #/properties/a", "pattern"},
    {"{\"properties\":{\"a\":{\"pattern\":\"(a)\\\\1\"}}}",
     "t: 'pattern' \"(a)\\1\" cannot be used: backreferences are not supported at #/properties/a",
     "pattern"},
    {"{\"properties\":{\"a\":{\"pattern\":\"\\\\bword\"}}}",
     "t: 'pattern' \"\\bword\" cannot be used: \\b (word boundary) is not supported at "
     "#/properties/a",
     "pattern"},
    {"{\"properties\":{\"a\":{\"pattern\":\"a\\\\u0000\"}}}",
     "t: 'pattern' \"a\\u0000\" cannot be used: a NUL character (\\u0000) is not supported at "
     "#/properties/a",
     "pattern"},
    {"{\"properties\":{\"a\":{\"pattern\":\"a**\"}}}",
     "t: 'pattern' \"a**\" cannot be used: a quantifier with nothing to repeat at #/properties/a",
     "pattern"},
    {"{\"properties\":{\"a\":{\"pattern\":\"[a-\"}}}",
     "t: 'pattern' \"[a-\" cannot be used: an unterminated character class at #/properties/a",
     "pattern"},
    {"{\"properties\":{\"a\":{\"pattern\":\"[^\\\\D]\"}}}",
     "t: 'pattern' \"[^\\D]\" cannot be used: \\D \\W \\S inside a larger class are not supported "
     "at #/properties/a",
     "pattern"},
    {"{\"properties\":{\"a\":{\"pattern\":\"(((a{1000}){1000}){1000})\"}}}",
     "t: 'pattern' \"(((a{1000}){1000}){1000})\" cannot be used: its counted repetitions ({n,m}) "
     "add more than 256 elements (use * or + with maxLength) at #/properties/a",
     "pattern"},
    {"{\"properties\":{\"a\":{\"pattern\":\"((a|b{2}){100}c){201}\"}}}",
     "t: 'pattern' \"((a|b{2}){100}c){201}\" cannot be used: its counted repetitions ({n,m}) "
     "add more than 256 elements (use * or + with maxLength) at #/properties/a",
     "pattern"},
    {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/"
     "$defs/a\"}",
     "t: '$ref' leads back to #/$defs/a without descending into the value (it would never end) at "
     "#/$defs/b",
     "$ref"},
    {"{\"anyOf\":[{\"$ref\":\"#\"},{\"$ref\":\"#\"}]}",
     "t: '$ref' leads back to # without descending into the value (it would never end) at "
     "#/anyOf/0",
     "$ref"},
    {"{\"type\":\"object\",\"$defs\":{\"n\":{\"not\":{\"$ref\":\"#\"}}},\"allOf\":[{\"$ref\":\"#/"
     "$defs/n\"}]}",
     "t: '$ref' leads back to # without descending into the value (it would never end) at "
     "#/$defs/n/not",
     "$ref"},
    {"{\"properties\":{\"a\":{\"pattern\":\"a)(b\"}}}",
     "t: 'pattern' \"a)(b\" cannot be used: an unmatched ) at #/properties/a", "pattern"},
    {"{\"properties\":{\"a\":{\"pattern\":7}}}", "t: 'pattern' must be a string at #/properties/a",
     "pattern"},
    {"{\"patternProperties\":{\"(?!x)\":{}}}",
     "t: 'patternProperties' \"(?!x)\" cannot be used: lookahead and lookbehind are not supported "
     "at #/patternProperties",
     "patternProperties"},
    {"{\"properties\":{\"a\":{\"$ref\":\"http://example.com/s.json\"}}}",
     "t: remote '$ref' \"http://example.com/s.json\" is not supported (only refs inside the "
     "schema) at #/properties/a",
     "$ref"},
    {"{\"$id\":\"http://x.test/root.json\",\"properties\":{\"a\":{\"$ref\":\"other.json\"}}}",
     "t: remote '$ref' \"other.json\" is not supported (only refs inside the schema) at "
     "#/properties/a",
     "$ref"},
    {"{\"properties\":{\"a\":{\"$ref\":\"#/$defs/nope\"}}}",
     "t: '$ref' \"#/$defs/nope\" points to nothing in the schema at #/properties/a", "$ref"},
    {"{\"properties\":{\"a\":{\"$ref\":\"#nope\"}}}",
     "t: '$ref' \"#nope\" points to nothing in the schema at #/properties/a", "$ref"},
    {"{\"$dynamicRef\":\"https://elsewhere.test/x#a\"}",
     "t: remote '$dynamicRef' \"https://elsewhere.test/x#a\" is not supported (only refs inside "
     "the schema) at #",
     "$dynamicRef"},
    {"{\"properties\":{\"a\":{\"type\":\"strin\"}}}",
     "t: 'type': unknown schema type strin at #/properties/a", "type"},
    {"{\"properties\":{\"a\":{\"type\":[]}}}",
     "t: 'type' must not be an empty list at #/properties/a", "type"},
    {"{\"required\":\"a\"}", "t: 'required' must be a list of names at #", "required"},
    {"{\"required\":[\"a\",\"a\"]}", "t: 'required' lists 'a' twice at #", "required"},
    {"{\"properties\":3}", "t: 'properties' must be an object at #", "properties"},
    {"{\"properties\":{\"a\":3}}", "t: a schema must be an object or a boolean at #/properties/a",
     "properties"},
    {"{\"allOf\":[]}", "t: 'allOf' must be a non-empty array of schemas at #", "allOf"},
    {"{\"anyOf\":[{},7]}", "t: a schema must be an object or a boolean at #/anyOf/1", "anyOf"},
    {"{\"additionalProperties\":\"no\"}",
     "t: 'additionalProperties' must be a schema (an object or a boolean) at #",
     "additionalProperties"},
    {"{\"dependentRequired\":{\"a\":\"b\"}}",
     "t: 'dependentRequired' must be an object of name lists at #", "dependentRequired"},
    {"{\"uniqueItems\":1}", "t: 'uniqueItems' must be true or false at #", "uniqueItems"},
    {"{\"$anchor\":\"1bad\"}", "t: '$anchor' must be a name ([A-Za-z_][A-Za-z0-9._-]*) at #",
     "$anchor"},
    {"{\"$id\":\"http://x.test/s#frag\"}",
     "t: '$id' \"http://x.test/s#frag\" must not have a fragment (use $anchor) at #", "$id"},
    {"{\"$schema\":\"http://json-schema.org/draft-07/schema#\"}",
     "t: '$schema' \"http://json-schema.org/draft-07/schema#\" is not supported (luagent "
     "implements draft 2020-12) at #",
     "$schema"},
    {"{\"x-luagent-assert-format\":true,\"properties\":{\"a\":{\"format\":\"color\"}}}",
     "t: 'format' \"color\" cannot be asserted by luagent at #/properties/a", "format"},
    {"{\"properties\":{\"a\":{\"x-luagent-assert-format\":true}}}",
     "t: unknown keyword 'x-luagent-assert-format' at #/properties/a", "x-luagent-assert-format"},
    {"{\"$vocabulary\":{\"https://example.test/vocab/mine\":true}}",
     "t: '$vocabulary' requires https://example.test/vocab/mine, which luagent does not implement "
     "at #",
     "$vocabulary"},
};

static void test_refused(void) {
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    cJSON *s = cJSON_Parse(refused[i].schema);
    if (!s) {
      fprintf(stderr, "refused case %zu: bad test JSON\n", i);
      test_failures_++;
      continue;
    }
    struct schema *cs = (struct schema *)1;
    struct err e = {0};
    CHECK_INT(schema_compile(s, NULL, "t", &cs, &e), ERR_INVALID);
    CHECK(cs == NULL);
    CHECK_STR(e.code, "invalid_schema");
    CHECK_STR(e.msg, refused[i].error);
    CHECK_STR(e.subject, refused[i].subject);
    /* schema_check says the same */
    struct err e2 = {0};
    CHECK_INT(schema_check(s, "t", &e2), ERR_INVALID);
    CHECK_STR(e2.msg, refused[i].error);
    cJSON_Delete(s);
  }
}

struct seen {
  int n;
  char kw[4][64], ptr[4][64];
};

static void on_unknown(void *ud, const char *kw, const char *ptr) {
  struct seen *s = ud;
  if (s->n < 4) {
    snprintf(s->kw[s->n], sizeof s->kw[0], "%s", kw);
    snprintf(s->ptr[s->n], sizeof s->ptr[0], "%s", ptr);
  }
  s->n++;
}

/* Schemas from elsewhere: unknown keywords reported and ignored, every
 * standard keyword still enforced and type-checked. */
static void test_lenient(void) {
  cJSON *s = cJSON_Parse(
      "{\"type\":\"object\",\"x-vendor\":1,\"properties\":{\"p\":{\"type\":\"string\","
      "\"pattern\":\"^[a-z]+$\",\"examplez\":[\"a\"]}},\"required\":[\"p\"]}");
  struct seen seen = {0};
  struct schema_opts o = {SCHEMA_LENIENT, on_unknown, &seen};
  struct schema *cs;
  struct err e = {0};
  CHECK_INT(schema_compile(s, &o, "mcp.tool params", &cs, &e), 0);
  CHECK_INT(seen.n, 2);
  CHECK_STR(seen.kw[0], "x-vendor");
  CHECK_STR(seen.ptr[0], "#");
  CHECK_STR(seen.kw[1], "examplez");
  CHECK_STR(seen.ptr[1], "#/properties/p");
  cJSON *v = cJSON_Parse("{\"p\":\"../x\"}");
  CHECK_INT(schema_run(cs, v, "args", &e), ERR_INVALID);
  CHECK_STR(e.msg, "args.p: does not match pattern \"^[a-z]+$\"");
  cJSON_Delete(v);
  schema_free(cs);
  cJSON_Delete(s);

  /* a standard keyword with a wrong value is still refused */
  s = cJSON_Parse("{\"type\":\"object\",\"x-vendor\":1,\"maxProperties\":\"2\"}");
  CHECK_INT(schema_compile(s, &o, "mcp.tool params", &cs, &e), ERR_INVALID);
  CHECK_STR(e.msg, "mcp.tool params: 'maxProperties' must be a non-negative integer at #");
  cJSON_Delete(s);
  /* and so is a remote ref */
  s = cJSON_Parse("{\"$ref\":\"https://example.test/s.json\"}");
  CHECK_INT(schema_compile(s, &o, "m", &cs, &e), ERR_INVALID);
  CHECK_STR(e.msg,
            "m: remote '$ref' \"https://example.test/s.json\" is not supported (only refs inside "
            "the schema) at #");
  cJSON_Delete(s);
  /* a ref into an unknown keyword's subtree still resolves */
  s = cJSON_Parse(
      "{\"definitions\":{\"n\":{\"type\":\"integer\"}},\"properties\":{\"a\":{\"$ref\":\"#/"
      "definitions/n\"}}}");
  CHECK_INT(schema_compile(s, &o, "m", &cs, &e), 0);
  v = cJSON_Parse("{\"a\":\"x\"}");
  CHECK_INT(schema_run(cs, v, "args", &e), ERR_INVALID);
  CHECK_STR(e.msg, "args.a: expected integer, got string");
  cJSON_Delete(v);
  schema_free(cs);
  cJSON_Delete(s);
}

/* An empty Lua table arrives as []: where the schema wants an object it
 * means {}; a Lua-written schema keeps working. */
static void test_lua_shapes(void) {
  cJSON *s = cJSON_Parse(
      "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"object\",\"properties\":[]}},"
      "\"required\":{},\"$defs\":[]}");
  struct err e = {0};
  CHECK_INT(schema_check(s, "t", &e), 0);
  cJSON_Delete(s);
}

/* uniqueItems on a large array: hashed, still exact (1 and 1.0 equal,
 * 2^53 and 2^53-1 not; objects equal whatever their key order). */
static void test_unique_large(void) {
  cJSON *s = cJSON_Parse("{\"uniqueItems\":true}");
  struct schema *cs;
  struct err e = {0};
  struct schema_opts o = {SCHEMA_ANY_ROOT, NULL, NULL};
  CHECK_INT(schema_compile(s, &o, "t", &cs, &e), 0);
  cJSON *v = cJSON_CreateArray();
  for (int i = 0; i < 5000; i++)
    cJSON_AddItemToArray(v, cJSON_CreateNumber(9007199254740991.0 - i));
  cJSON_AddItemToArray(v, cJSON_CreateNumber(9007199254740992.0));
  CHECK_INT(schema_run(cs, v, "args", &e), 0);
  cJSON_AddItemToArray(v, cJSON_Parse("{\"a\":1,\"b\":[2]}"));
  cJSON_AddItemToArray(v, cJSON_Parse("{\"b\":[2.0],\"a\":1}"));
  CHECK_INT(schema_run(cs, v, "args", &e), ERR_INVALID);
  CHECK_STR(e.msg, "args: items [5001] and [5002] are equal, must be unique");
  cJSON_Delete(v);
  schema_free(cs);
  cJSON_Delete(s);
}

/* A run that goes too deep or too long ends as a whole, even inside
 * `not` or `anyOf` (where a failed branch would otherwise count as an
 * answer). */
static void test_runaway(void) {
  struct err e = {0};
  struct schema *cs;
  struct schema_opts o = {SCHEMA_ANY_ROOT, NULL, NULL};
  cJSON *s = cJSON_Parse(
      "{\"not\":{\"$ref\":\"#/$defs/t\"},\"$defs\":{\"t\":{\"properties\":{\"a\":{\"$ref\":\"#/"
      "$defs/t\"}}}}}");
  CHECK_INT(schema_compile(s, &o, "t", &cs, &e), 0);
  cJSON *v = cJSON_CreateObject(), *at = v;
  for (int i = 0; i < 300; i++) at = cJSON_AddObjectToObject(at, "a");
  CHECK_INT(schema_run(cs, v, "args", &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, ": schema evaluation deeper than 200 levels (a $ref cycle?)");
  CHECK(!strncmp(e.msg, "args.a.a.a", 10));
  cJSON_Delete(v);
  schema_free(cs);
  cJSON_Delete(s);

  /* 40 levels of anyOf with two branches each: 2^40 paths, no cycle */
  struct sbuf_like {
    char buf[8192];
    size_t n;
  } b = {{0}, 0};
  b.n += (size_t)snprintf(b.buf + b.n, sizeof b.buf - b.n, "{\"$ref\":\"#/$defs/d0\",\"$defs\":{");
  for (int i = 0; i < 40; i++)
    b.n += (size_t)snprintf(
        b.buf + b.n, sizeof b.buf - b.n,
        "\"d%d\":{\"anyOf\":[{\"$ref\":\"#/$defs/d%d\"},{\"$ref\":\"#/$defs/d%d\"}]},", i, i + 1,
        i + 1);
  snprintf(b.buf + b.n, sizeof b.buf - b.n, "\"d40\":{\"type\":\"string\"}}}");
  s = cJSON_Parse(b.buf);
  CHECK(s != NULL);
  CHECK_INT(schema_compile(s, &o, "t", &cs, &e), 0);
  v = cJSON_CreateNumber(1);
  CHECK_INT(schema_run(cs, v, "args", &e), ERR_INVALID);
  CHECK_STR(e.msg, "args: schema evaluation took more than 1000000 steps");
  cJSON_Delete(v);
  v = cJSON_CreateString("s"); /* the first path succeeds at once */
  CHECK_INT(schema_run(cs, v, "args", &e), 0);
  cJSON_Delete(v);
  schema_free(cs);
  cJSON_Delete(s);
}

/* Matching stays linear in the input (glibc retried every start position:
 * "[a-z]+@" on 100 KB took a minute), and a pattern whose expanded size
 * times the input exceeds the budget refuses to decide, naming why. */
static void test_pattern_cost(void) {
  struct err e = {0};
  struct schema *cs;
  struct schema_opts o = {SCHEMA_ANY_ROOT, NULL, NULL};
  cJSON *s = cJSON_Parse("{\"pattern\":\"[a-z]+@\"}");
  CHECK_INT(schema_compile(s, &o, "t", &cs, &e), 0);
  char *big = malloc(200001);
  memset(big, 'x', 200000);
  big[200000] = 0;
  cJSON *v = cJSON_CreateString(big);
  double t0 = util_monotonic();
  CHECK_INT(schema_run(cs, v, "args", &e), ERR_INVALID);
  double dt = util_monotonic() - t0;
  if (dt >= 2) fprintf(stderr, "  [a-z]+@ on 200 KB took %.1f s\n", dt);
  CHECK(dt < 2);
  CHECK_STR(e.msg, "args: does not match pattern \"[a-z]+@\"");
  cJSON_Delete(v);
  schema_free(cs);
  cJSON_Delete(s);

  /* {0,256} is allowed, {0,300} is not; and under the cap, a value too
   * long for the budget is refused with its own message */
  s = cJSON_Parse("{\"pattern\":\"^[A-Za-z0-9+/]{0,300}$\"}");
  CHECK_INT(schema_compile(s, &o, "t", &cs, &e), ERR_INVALID);
  cJSON_Delete(s);
  s = cJSON_Parse("{\"pattern\":\"^[A-Za-z0-9+/]{0,256}={0,2}$\"}");
  CHECK_INT(schema_compile(s, &o, "t", &cs, &e), 0);
  big[1000] = 0;
  v = cJSON_CreateString(big);
  t0 = util_monotonic();
  CHECK_INT(schema_run(cs, v, "args", &e), ERR_INVALID);
  dt = util_monotonic() - t0;
  if (dt >= 2) fprintf(stderr, "  {0,256} on 1000 characters took %.1f s\n", dt);
  CHECK(dt < 2);
  cJSON_Delete(v);
  schema_free(cs);
  cJSON_Delete(s);
  s = cJSON_Parse("{\"pattern\":\"[a-z]{1,250}@\"}");
  CHECK_INT(schema_compile(s, &o, "t", &cs, &e), 0);
  big[1000] = 'x';
  big[100000] = 0;
  v = cJSON_CreateString(big);
  CHECK_INT(schema_run(cs, v, "args", &e), ERR_INVALID);
  CHECK_STR(
      e.msg,
      "args: is too long (100000 bytes) to match pattern \"[a-z]{1,250}@\" within the budget");
  cJSON_Delete(v);
  v = cJSON_CreateString("abc@"); /* short values still match */
  CHECK_INT(schema_run(cs, v, "args", &e), 0);
  cJSON_Delete(v);
  schema_free(cs);
  cJSON_Delete(s);
  free(big);
}

/* Many $defs, $id and $anchor: compiling stays near-linear (a quadratic
 * lookup took 4 s here for 20000 refs; 40000 would take 16 s). */
static void test_large_schema(void) {
  enum { N = 40000 };
  struct sbuf b = {0};
  sbuf_puts(&b, "{\"$ref\":\"#/$defs/d0\",\"$defs\":{");
  for (int i = 0; i < N; i++)
    sbuf_printf(&b,
                "\"d%d\":{\"$id\":\"u%d.json\",\"$anchor\":\"a\",\"properties\":{\"x\":{\"$ref\":"
                "\"u%d.json#a\"}}},",
                i, i, i + 1);
  sbuf_printf(&b, "\"d%d\":{\"$id\":\"u%d.json\",\"$anchor\":\"a\",\"type\":\"string\"}}}", N, N);
  cJSON *s = cJSON_Parse(b.s);
  sbuf_free(&b);
  CHECK(s != NULL);
  struct schema *cs;
  struct err e = {0};
  struct schema_opts o = {SCHEMA_ANY_ROOT, NULL, NULL};
  double t0 = util_monotonic();
  CHECK_INT(schema_compile(s, &o, "t", &cs, &e), 0);
  double dt = util_monotonic() - t0;
  if (dt >= 5) fprintf(stderr, "  compiling %d refs took %.1f s\n", N, dt);
  CHECK(dt < 5);
  cJSON *v = cJSON_Parse("{\"x\":{\"x\":{\"x\":5}}}");
  CHECK_INT(schema_run(cs, v, "args", &e), 0); /* d3 is an object schema: 5 has no properties */
  cJSON_Delete(v);
  schema_free(cs);
  cJSON_Delete(s);
}

static void test_null_and_shared(void) {
  struct err e = {0};
  struct schema *cs = NULL;
  schema_free(NULL);
  CHECK_INT(schema_compile(NULL, NULL, "t", &cs, &e), ERR_INVALID);
  CHECK_STR(e.msg, "t: no schema");
  CHECK_INT(schema_run(NULL, NULL, "args", &e), ERR_INVALID);
  /* schema_validate: one-shot, any root */
  cJSON *s = cJSON_Parse("{\"type\":\"string\",\"maxLength\":1}"), *v = cJSON_CreateString("ab");
  CHECK_INT(schema_validate(s, v, "answer", &e), ERR_INVALID);
  CHECK_STR(e.msg, "answer: must be at most 1 characters, got 2");
  cJSON_Delete(s);
  s = cJSON_Parse("{\"requried\":[]}");
  CHECK_INT(schema_validate(s, v, "answer", &e), ERR_INVALID);
  CHECK_STR(e.code, "invalid_schema");
  cJSON_Delete(s);
  cJSON_Delete(v);
  /* The same compiled schema validates many values (it is read-only). */
  s = cJSON_Parse(
      "{\"type\":\"object\",\"properties\":{\"n\":{\"pattern\":\"^a\"}},\"unevaluatedProperties\":"
      "false}");
  CHECK_INT(schema_compile(s, NULL, "t", &cs, &e), 0);
  for (int i = 0; i < 100; i++) {
    char buf[200];
    snprintf(buf, sizeof buf, "{\"n\":\"%s\"%s}", i % 2 ? "abc" : "bc", i % 3 ? "" : ",\"x\":1");
    v = cJSON_Parse(buf);
    int want_ok = (i % 2) && (i % 3);
    CHECK_INT(schema_run(cs, v, "args", &e) == 0, want_ok);
    cJSON_Delete(v);
  }
  schema_free(cs);
  cJSON_Delete(s);
}

int main(void) {
  test_cases();
  test_exact_big_integers();
  test_nul_length();
  test_nul_pattern();
  test_formats_asserted();
  test_refused();
  test_lenient();
  test_lua_shapes();
  test_unique_large();
  test_runaway();
  test_large_schema();
  test_pattern_cost();
  test_null_and_shared();
  return TEST_END();
}

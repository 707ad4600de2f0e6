#!/usr/bin/env python3
"""schema_diff.py - differential test of luagent's JSON Schema validator
against python-jsonschema (Draft202012Validator), where that is installed.

Usage: bench/schema_diff.py SEED DIR/OUT.json; then build/bench_schema_suite DIR -v
Writes random schemas (applicator and validation keywords, local $ref and
$anchor, unevaluated*) with random instances in the JSON-Schema-Test-Suite
file format, python-jsonschema's verdict as the expected one. Schemas
luagent refuses when compiling (a $ref to nothing, an in-place $ref cycle:
python resolves lazily and may never reach them) show as "schema refused";
any other difference is a bug on one side.
"""
import json, random, sys, warnings
warnings.filterwarnings("ignore")
from jsonschema import Draft202012Validator
random.seed(int(sys.argv[1]))
names = ["a", "b", "c"]
def rval(d=0):
    r = random.randrange(9 if d < 3 else 5)
    if r == 0: return None
    if r == 1: return random.choice([0, 1, 2, 1.5, -1, 2.0, 10])
    if r == 2: return random.choice(["", "a", "ab", "abc", "b1"])
    if r == 3: return random.choice([True, False])
    if r == 4: return random.choice([1, "a"])
    if r in (5, 6): return [rval(d + 1) for _ in range(random.randrange(4))]
    return {random.choice(names): rval(d + 1) for _ in range(random.randrange(4))}
def rschema(d=0):
    if d > 3 or random.random() < 0.15: return random.choice([True, False, {}])
    s = {}
    for _ in range(random.randrange(1, 4)):
        k = random.choice(KW)
        s[k] = gen(k, d)
    return s
def gen(k, d):
    if k == "type": return random.choice(["object", "array", "string", "integer", "number", "null", "boolean", ["string", "null"], ["integer", "object"]])
    if k in ("properties", "patternProperties", "dependentSchemas", "$defs"):
        keys = names if k != "patternProperties" else ["^a", "b", "^c$", "."]
        return {random.choice(keys): rschema(d + 1) for _ in range(random.randrange(1, 3))}
    if k in ("allOf", "anyOf", "oneOf", "prefixItems"): return [rschema(d + 1) for _ in range(random.randrange(1, 3))]
    if k in ("not", "if", "then", "else", "items", "contains", "additionalProperties", "propertyNames", "unevaluatedProperties", "unevaluatedItems"): return rschema(d + 1)
    if k == "required": return random.sample(names, random.randrange(1, 3))
    if k == "dependentRequired": return {random.choice(names): random.sample(names, 1)}
    if k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"): return random.choice([0, 1, 1.5, 2])
    if k == "multipleOf": return random.choice([0.5, 1, 2, 1.5])
    if k in ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties", "minContains", "maxContains"): return random.randrange(3)
    if k == "uniqueItems": return random.choice([True, False])
    if k == "enum": return [rval(1) for _ in range(random.randrange(1, 3))]
    if k == "const": return rval(1)
    if k == "pattern": return random.choice(["^a", "b", "^[ab]+$", "\\d", "^.$"])
    if k == "$ref": return random.choice(["#", "#/$defs/a", "#/$defs/b", "#x"])
KW = ["type", "properties", "patternProperties", "dependentSchemas", "allOf", "anyOf", "oneOf", "prefixItems", "not", "if", "then", "else", "items", "contains",
      "additionalProperties", "propertyNames", "unevaluatedProperties", "unevaluatedItems", "required", "dependentRequired", "minimum", "maximum",
      "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties",
      "minContains", "maxContains", "uniqueItems", "enum", "const", "pattern", "$defs", "$ref"]
groups = []
while len(groups) < 1500:
    s = rschema()
    if isinstance(s, dict) and random.random() < 0.5:
        s["$defs"] = {"a": rschema(1), "b": rschema(1), "x": {"$anchor": "x", "allOf": [rschema(2)]}}
    try:
        v = Draft202012Validator(s)
        tests = []
        for _ in range(6):
            x = rval()
            tests.append({"description": json.dumps(x), "data": x, "valid": v.is_valid(x)})
    except BaseException as e:
        continue
    groups.append({"description": json.dumps(s), "schema": s, "tests": tests})
json.dump(groups, open(sys.argv[2], "w"))

/* schema.h - JSON Schema validation for tool parameters.
 *
 * Supports the subset tools use: type (incl. arrays of types, "integer"),
 * properties, required, additionalProperties (bool or schema), enum, const,
 * minimum/maximum/exclusiveMinimum/exclusiveMaximum, minLength/maxLength,
 * items, minItems/maxItems, anyOf/oneOf. Errors name the path ("args.items[2].id")
 * and what was expected.
 */
#ifndef LUAGENT_SCHEMA_H
#define LUAGENT_SCHEMA_H

#include <cjson/cJSON.h>

#include "err.h"

/* Validates value against schema. where prefixes the path in messages
 * (e.g. "fs.read: args"). Returns 0 or ERR_INVALID with code "invalid_args". */
int schema_validate(const cJSON *schema, const cJSON *value, const char *where, struct err *e);
/* Checks that a schema itself is usable (an object, known types). */
int schema_check(const cJSON *schema, const char *where, struct err *e);

#endif

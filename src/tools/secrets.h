/* secrets.h - encrypted secrets (table `secrets`) and their redaction.
 *
 * Values are sealed with libsodium's secretbox (XSalsa20-Poly1305) under a
 * 32-byte key taken from an environment variable (config `secrets_key_env`,
 * 64 hex digits) or from <workspace>/.luagent/secrets.key, created 0600 on
 * first use. The name is sealed together with the value, so a ciphertext
 * copied onto another name fails to open.
 *
 * Lua and the model never see values: host tools accept { secret = "NAME" }
 * where a value is needed and resolve it in C (secrets_resolve). A secret
 * goes only to the origins luagent.lua declares for it
 * (`secrets = { NAME = { origins = { "https://host" } } }`): a host tool
 * checks secrets_check_origin before every request that would carry it, a
 * redirect included, and a secret declared nowhere goes nowhere. Every value
 * resolved in this process is remembered, and secrets_redact scrubs them
 * from any text before it is logged, printed, stored or audited.
 */
#ifndef LUAGENT_SECRETS_H
#define LUAGENT_SECRETS_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "err.h"
#include "origin.h"
#include "store.h"

struct config;
struct runtime;

#define SECRETS_KEY_BYTES 32

/* Loads the key: from the environment variable env_name when it is set
 * (64 hex digits), else from <workspace>/.luagent/secrets.key. create != 0
 * creates the key file (0600) when missing. A key file readable by group or
 * others is refused. */
int secrets_load_key(const char *workspace, const char *env_name, int create,
                     unsigned char key[SECRETS_KEY_BYTES], struct err *e);

/* Reads (or with create, first creates with random bytes) a key file of
 * exactly n bytes stored as hex, mode 0600. Shared with the audit signer,
 * the console's and the MCP server's tokens. Processes that create one
 * key at the same moment all get the same key, and the file never holds
 * part of one (it is linked into place whole). */
int secrets_keyfile(const char *path, unsigned char *out, size_t n, int create, struct err *e);
/* The same, creating when missing; *created (may be NULL) says whether
 * this call made the key (then only this caller may remove it again). */
int secrets_keyfile_new(const char *path, unsigned char *out, size_t n, int *created,
                        struct err *e);

/* Names: [A-Za-z_][A-Za-z0-9_.-]{0,63}. Returns 1 when valid. */
int secrets_name_valid(const char *name);

/* Stores (inserts or replaces) a value. */
int secrets_put(struct store *s, const unsigned char key[SECRETS_KEY_BYTES], const char *name,
                const char *value, size_t len, struct err *e);
/* Opens a value: *value is malloc'd and NUL-terminated (caller frees, after
 * sodium_memzero if it cares); *len may be NULL. ERR_NOTFOUND when absent. */
int secrets_get(struct store *s, const unsigned char key[SECRETS_KEY_BYTES], const char *name,
                char **value, size_t *len, struct err *e);
/* Removes a secret; ERR_NOTFOUND when absent. */
int secrets_remove(struct store *s, const char *name, struct err *e);
/* All names, sorted, as a malloc'd NULL-terminated array of malloc'd
 * strings (free with secrets_free_names). */
int secrets_names(struct store *s, char ***names, struct err *e);
void secrets_free_names(char **names);

/* For host tools: the value of secret `name` in the runtime's workspace,
 * malloc'd in *value (caller frees). The value is registered for redaction. */
int secrets_resolve(struct runtime *rt, const char *name, char **value, struct err *e);
/* For host tools: an argument that is either a plain string (copied) or
 * { secret = "NAME" } (resolved). *value malloc'd; caller frees. */
int secrets_resolve_value(struct runtime *rt, const cJSON *v, char **value, struct err *e);
struct curl_slist;
/* Appends "Name: value" to *list for each member of hdrs (a plain string or
 * { secret = "NAME" }, resolved by secrets_resolve_value); values are wiped
 * from our buffers once curl holds its copy. A value with CR, LF or NUL is
 * refused (it would add a header of its own). On error *list is freed and
 * NULL, and the message starts with `what` and names the header. The
 * caller checks each secret's origins first (secrets_check_origin). */
int secrets_append_headers(struct runtime *rt, const cJSON *hdrs, const char *what,
                           struct curl_slist **list, struct err *e);
/* For host tools, before sending secret `name` to origin o: 0 when cfg
 * declares o among the secret's origins. Else ERR_DENIED, code
 * "secret_not_allowed", and a message that starts with `tool` and names the
 * secret, o and the allowed origins ("http.request: secret API may not be
 * sent to http://h:81 (allowed: https://h)"), or says how to declare
 * origins when there are none. Reads no secret value. */
int secrets_check_origin(const struct config *cfg, const char *tool, const char *name,
                         const struct origin *o, struct err *e);
/* 1 when v is a { secret = "NAME" } reference. */
int secrets_is_ref(const cJSON *v);

/* Registers a value for redaction (secrets_resolve does this itself). */
void secrets_register_value(const char *value, size_t len);
/* Number of registered values; 0 means redaction is a no-op. */
size_t secrets_registered(void);
/* A malloc'd copy of text[0..len) with every registered value replaced by
 * "[secret]"; *outlen may be NULL. */
char *secrets_redact(const char *text, size_t len, size_t *outlen);
/* Redacts every string (values and keys) inside a JSON value in place.
 * Returns the number of replacements. */
int secrets_redact_json(cJSON *v);
/* Forgets all registered values (tests). */
void secrets_forget_all(void);

#endif

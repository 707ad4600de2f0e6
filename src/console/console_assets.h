/* console_assets.h - the console's pages, compiled in (console_assets.c is
 * generated at build time by cmake/embed_assets.cmake from the files in
 * src/console/console_assets/). */
#ifndef LUAGENT_CONSOLE_ASSETS_H
#define LUAGENT_CONSOLE_ASSETS_H

#include <stddef.h>

struct console_asset {
  const char *name;          /* file name, e.g. "app.js"; NULL ends the table */
  const unsigned char *data; /* NUL-terminated copy of the file */
  size_t len;
};

extern const struct console_asset console_assets[];

#endif

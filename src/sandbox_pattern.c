/* sandbox_pattern.c - placeholder: keeps the stock matcher until the
 * bounded one lands (branch `pattern`). */
#include "sandbox_impl.h"

void sandbox__open_pattern(lua_State *L, int idx) {
  (void)L;
  (void)idx;
}

/* A deliberate upward call, linked as part of the kv layer by tests/CMakeLists.txt's
 * layer_upward_call test: the build must refuse it (kv does not link the engine above it). */
#include <stdint.h>

struct engine;
uint32_t engine_running(const struct engine *e);

uint32_t layer_probe_upward_call(const struct engine *e) { return engine_running(e); }

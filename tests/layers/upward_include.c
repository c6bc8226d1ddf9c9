/* A deliberate upward include, checked as a file of the kv layer by tests/CMakeLists.txt's
 * layer_upward_include test: cmake/check_includes.cmake must refuse it. */
#include "engine/engine.h"

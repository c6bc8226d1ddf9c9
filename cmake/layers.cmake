# The layer graph, held by the build (docs/ARCHITECTURE.md, Modules).
#
# cinder_layer(NAME DIRS d... LINK deps...) declares one layer: a static library of the sources
# in its folders, linked (PUBLIC) against the layers below it that it calls. Two checks turn the
# drawing into something the build enforces:
#   - includes: every `#include "path"` of a layer's sources and headers names a file of the
#     layer itself or of a layer below it (cmake/check_includes.cmake, run before any layer
#     compiles: an upward include fails the build even when it only pulls inline code);
#   - links: layer_link_NAME links the whole archive of NAME against its declared layers only,
#     so a call into a layer above (or one not declared) is an undefined reference. In the
#     cinder binary GNU ld would resolve it against that layer's objects pulled in by others.
# tests/CMakeLists.txt proves both fail on a deliberate upward include and call.

set(CINDER_LAYER_TABLE ${CMAKE_BINARY_DIR}/layers.txt)
file(WRITE ${CINDER_LAYER_TABLE} "")
set_property(GLOBAL PROPERTY CINDER_LAYER_SOURCES "")

function(cinder_layer name)
  cmake_parse_arguments(L "" "" "DIRS;EXTRA;LINK" ${ARGN})
  set(globs "")
  foreach(d ${L_DIRS})
    list(APPEND globs ${d}/*.c)
  endforeach()
  file(GLOB srcs CONFIGURE_DEPENDS ${globs})
  add_library(${name} STATIC ${srcs} ${L_EXTRA})
  target_include_directories(${name} PUBLIC ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/generated)
  target_compile_definitions(${name} PUBLIC
    CINDER_NPM_DIR="${CINDER_NPM_DIR}" CINDER_SOURCE_DIR="${CMAKE_SOURCE_DIR}" VK_NO_PROTOTYPES)
  target_link_libraries(${name} PUBLIC ${L_LINK})
  cinder_layer_record(${name} "${L_DIRS}" "${L_LINK}")
  add_dependencies(${name} cinder_layer_includes)

  add_executable(layer_link_${name} ${CMAKE_SOURCE_DIR}/cmake/layer_link_main.c)
  target_link_libraries(layer_link_${name} PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,${name}>")
endfunction()

# One line of the table the include check reads: `name | dirs | layers it links`.
function(cinder_layer_record name dirs links)
  set(layers "")
  foreach(l ${links})
    if(l MATCHES "^cinder_")
      list(APPEND layers ${l})
    endif()
  endforeach()
  string(REPLACE ";" " " dirs "${dirs}")
  string(REPLACE ";" " " layers "${layers}")
  file(APPEND ${CINDER_LAYER_TABLE} "${name}|${dirs}|${layers}\n")
  foreach(d ${dirs})
    file(GLOB_RECURSE files CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${d}/*.c ${CMAKE_SOURCE_DIR}/${d}/*.h)
    set_property(GLOBAL APPEND PROPERTY CINDER_LAYER_SOURCES ${files})
  endforeach()
endfunction()

# After the last layer: the include check over every layer's files, re-run when any changes.
function(cinder_layer_checks)
  get_property(files GLOBAL PROPERTY CINDER_LAYER_SOURCES)
  set(stamp ${CMAKE_BINARY_DIR}/layers.stamp)
  add_custom_command(OUTPUT ${stamp}
    COMMAND ${CMAKE_COMMAND} -DTABLE=${CINDER_LAYER_TABLE} -DROOT=${CMAKE_SOURCE_DIR}
            -P ${CMAKE_SOURCE_DIR}/cmake/check_includes.cmake
    COMMAND ${CMAKE_COMMAND} -E touch ${stamp}
    DEPENDS ${files} ${CINDER_LAYER_TABLE} ${CMAKE_SOURCE_DIR}/cmake/check_includes.cmake
    COMMENT "Checking that every layer includes only itself and the layers below it")
  add_custom_target(cinder_layer_includes DEPENDS ${stamp})
endfunction()

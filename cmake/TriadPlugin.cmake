# triad_add_plugin(KIND NAME SOURCES...): builds libtriad-<kind>-<name>.so against the SDK.
# Shipped with the installed SDK, so out-of-tree plugins use the same function.
function(triad_add_plugin KIND NAME)
  set(target triad-${KIND}-${NAME})
  add_library(${target} MODULE ${ARGN})
  target_link_libraries(${target} PRIVATE Triad::sdk)
  set_target_properties(${target} PROPERTIES
    PREFIX "lib" OUTPUT_NAME "triad-${KIND}-${NAME}"
    CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  # GCC marks a library that defines "unique" inline statics (from libstdc++ headers) as
  # never unloadable; without them a plugin .so really unloads after its last object is gone.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE -fno-gnu-unique)
  endif()
  if(DEFINED TRIAD_PLUGIN_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${TRIAD_PLUGIN_OUTPUT_DIR})
  endif()
  if(DEFINED TRIAD_PLUGIN_INSTALL_DIR)
    install(TARGETS ${target} LIBRARY DESTINATION ${TRIAD_PLUGIN_INSTALL_DIR})
  endif()
endfunction()

# Installs the SDK (headers + CMake package) so out-of-tree plugins can
#   find_package(Triad REQUIRED)  and  triad_add_plugin(attention myname my.cpp)
# with nothing but CMAKE_PREFIX_PATH pointing at the prefix: the package needs no other package.
include(CMakePackageConfigHelpers)
set(TRIAD_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Triad)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/core/include/triad/sdk DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/triad)
# The SDK's C ABI passes DLPack tensors, so the DLPack header Triad was built with ships beside
# it (in a folder of its own, which only plugins built against this SDK search): a plugin
# compiles against the very DLTensor layout the core uses, and needs no DLPack of its own.
get_target_property(_dlpack_include dlpack::dlpack INTERFACE_INCLUDE_DIRECTORIES)
find_file(TRIAD_DLPACK_HEADER dlpack/dlpack.h HINTS ${_dlpack_include} REQUIRED)
install(FILES ${TRIAD_DLPACK_HEADER} DESTINATION ${TRIAD_SDK_DLPACK_INCLUDEDIR}/dlpack)
install(TARGETS triad_sdk EXPORT TriadTargets)
install(EXPORT TriadTargets NAMESPACE Triad:: DESTINATION ${TRIAD_CMAKE_INSTALL_DIR})
# The package is configured into a folder find_package never searches; the build tree's own
# TriadConfig.cmake only says to install first (its layout is not a prefix's).
set(_config_dir ${CMAKE_BINARY_DIR}/triad-package)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/TriadConfig.cmake.in
  ${_config_dir}/TriadConfig.cmake INSTALL_DESTINATION ${TRIAD_CMAKE_INSTALL_DIR}
  PATH_VARS TRIAD_PLUGIN_INSTALL_DIR)
write_basic_package_version_file(${_config_dir}/TriadConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${_config_dir}/TriadConfig.cmake ${_config_dir}/TriadConfigVersion.cmake
  ${CMAKE_SOURCE_DIR}/cmake/TriadPlugin.cmake DESTINATION ${TRIAD_CMAKE_INSTALL_DIR})
configure_file(${CMAKE_SOURCE_DIR}/cmake/TriadBuildTreeConfig.cmake.in
  ${CMAKE_BINARY_DIR}/TriadConfig.cmake @ONLY)
# The same SDK for builds without CMake (pkg-config), relocatable: the prefix is found from the
# .pc file's own folder, so `cmake --install --prefix P` needs no reconfigure.
file(RELATIVE_PATH TRIAD_PC_TO_PREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
configure_file(${CMAKE_SOURCE_DIR}/cmake/triad.pc.in ${_config_dir}/triad.pc @ONLY)
install(FILES ${_config_dir}/triad.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

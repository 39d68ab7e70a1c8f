# Installs the SDK (headers + CMake package) so out-of-tree plugins can
#   find_package(Triad REQUIRED)  and  triad_add_plugin(attention myname my.cpp)
include(CMakePackageConfigHelpers)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/core/include/triad/sdk DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/triad)
install(TARGETS triad_sdk EXPORT TriadTargets)
install(EXPORT TriadTargets NAMESPACE Triad:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Triad)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/TriadConfig.cmake.in
  ${CMAKE_BINARY_DIR}/TriadConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Triad)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/TriadConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/TriadConfig.cmake ${CMAKE_BINARY_DIR}/TriadConfigVersion.cmake
  ${CMAKE_SOURCE_DIR}/cmake/TriadPlugin.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Triad)

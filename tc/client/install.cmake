# Installing the client library (`cmake --install`): the public headers,
# one static archive holding the library and every Deuteron library it
# uses (libdeuteron_client.a), and a CMake package (DeuteronConfig.cmake)
# that defines the imported target Deuteron::client, so that another
# project can
#   find_package(Deuteron REQUIRED)
#   target_link_libraries(app PRIVATE Deuteron::client)
# Layout under the prefix: include/deuteron/{tc/client/client.h,
# common/status.h}, lib/libdeuteron_client.a, lib/cmake/Deuteron/.
# The package is written by hand (not install(EXPORT)): the archive is one
# file, and its outside dependencies are found again on the consumer's side
# (fmt, Threads) or named by the paths this build used (thrift, jemalloc).
# tc/client/example/ is a project that uses it; tests/tc/client/
# install_test.cmake installs, builds and runs that example.
include(CMakePackageConfigHelpers)
include(GNUInstallDirs)

# Every Deuteron archive the client library needs, in link order.
set(DEUTERON_CLIENT_PARTS
  deuteron_client deuteron_tc_embedded deuteron_tc_txn deuteron_tc_lock deuteron_wal
  deuteron_dc deuteron_server deuteron_protocol deuteron_protocol_gen deuteron_common)
set(DEUTERON_CLIENT_BUNDLE ${CMAKE_CURRENT_BINARY_DIR}/bundle/libdeuteron_client.a)
set(mri "CREATE ${DEUTERON_CLIENT_BUNDLE}\n")
foreach(part IN LISTS DEUTERON_CLIENT_PARTS)
  string(APPEND mri "ADDLIB $<TARGET_FILE:${part}>\n")
endforeach()
string(APPEND mri "SAVE\nEND\n")
file(GENERATE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/bundle/bundle.mri CONTENT "${mri}")
add_custom_command(
  OUTPUT ${DEUTERON_CLIENT_BUNDLE}
  COMMAND ${CMAKE_COMMAND} -E rm -f ${DEUTERON_CLIENT_BUNDLE}
  COMMAND ${CMAKE_AR} -M < ${CMAKE_CURRENT_BINARY_DIR}/bundle/bundle.mri
  DEPENDS ${DEUTERON_CLIENT_PARTS} ${CMAKE_CURRENT_BINARY_DIR}/bundle/bundle.mri
  COMMENT "Bundling the client library into one archive"
  VERBATIM)
add_custom_target(deuteron_client_bundle ALL DEPENDS ${DEUTERON_CLIENT_BUNDLE})

# What a consumer must compile and link with to match this build.
set(DEUTERON_CLIENT_DEFINITIONS "")
if(DEUTERON_STATUS_CHECKED)
  # Status has an extra member in these builds: the consumer must agree.
  list(APPEND DEUTERON_CLIENT_DEFINITIONS DEUTERON_STATUS_CHECKED=1)
endif()
# A sanitizer build's archive needs its runtime, and the consumer is best
# instrumented the same way.
set(DEUTERON_CLIENT_LINK_OPTIONS "")
if(DEUTERON_SANITIZER STREQUAL "address")
  set(DEUTERON_CLIENT_LINK_OPTIONS -fsanitize=address,undefined)
elseif(DEUTERON_SANITIZER STREQUAL "thread")
  set(DEUTERON_CLIENT_LINK_OPTIONS -fsanitize=thread)
endif()
set(DEUTERON_CLIENT_SYSTEM_LIBS ${THRIFT_LINK_LIBRARIES})
if(DEUTERON_JEMALLOC AND DEUTERON_SANITIZER STREQUAL "")
  list(APPEND DEUTERON_CLIENT_SYSTEM_LIBS ${JEMALLOC_LINK_LIBRARIES})
endif()
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/client/DeuteronConfig.cmake.in
               ${CMAKE_CURRENT_BINARY_DIR}/DeuteronConfig.cmake @ONLY)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/DeuteronConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)

install(FILES ${DEUTERON_CLIENT_BUNDLE} DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT client)
install(FILES ${PROJECT_SOURCE_DIR}/tc/client/client.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/deuteron/tc/client COMPONENT client)
install(FILES ${PROJECT_SOURCE_DIR}/common/status.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/deuteron/common COMPONENT client)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/DeuteronConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/DeuteronConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Deuteron COMPONENT client)

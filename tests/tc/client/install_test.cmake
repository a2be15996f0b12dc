# The installed client library works for another project (run by CTest as
# tc.client.install, `cmake -P` with BUILD_DIR, SOURCE_DIR, WORK_DIR,
# GENERATOR, CXX_COMPILER): installs the client component of BUILD_DIR into
# a fresh prefix, configures and builds tc/client/example against it with
# find_package(Deuteron), and runs the example on an embedded store.
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install_test.cmake: ${var} is not set")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix --component client)
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tc/client/example -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
    -DCMAKE_BUILD_TYPE=Debug)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/deuteron_client_example embedded ${WORK_DIR}/db)
file(REMOVE_RECURSE ${WORK_DIR})

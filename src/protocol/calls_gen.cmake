# The plain driver calls (calls.api -> gen_calls.py): include()d from
# src/CMakeLists.txt. Writes into FLYT_CALLS_GEN_DIR the call ids (protocol),
# the server's table, the CUDA backend's dispatch and the client's exports;
# target calls_generated.
find_package(Python3 COMPONENTS Interpreter REQUIRED)
set(FLYT_CALLS_GEN_DIR ${CMAKE_CURRENT_BINARY_DIR}/calls-gen CACHE INTERNAL "gen_calls.py outputs")
set(_flyt_calls_outputs ${FLYT_CALLS_GEN_DIR}/flyt_calls.h ${FLYT_CALLS_GEN_DIR}/flyt_calls_desc.inc
                        ${FLYT_CALLS_GEN_DIR}/flyt_calls_cuda.inc ${FLYT_CALLS_GEN_DIR}/flyt_calls_client.c)
add_custom_command(
  OUTPUT ${_flyt_calls_outputs}
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/gen_calls.py
          --api ${CMAKE_CURRENT_LIST_DIR}/calls.api
          --exports ${PROJECT_SOURCE_DIR}/src/client/libcuda.exports
          --typedefs ${FLYT_CUDA_HOME}/include/cudaTypedefs.h
          --typedefs ${FLYT_CUDA_HOME}/include/cudaProfilerTypedefs.h
          --outdir ${FLYT_CALLS_GEN_DIR}
  DEPENDS ${CMAKE_CURRENT_LIST_DIR}/gen_calls.py ${CMAKE_CURRENT_LIST_DIR}/calls.api
          ${PROJECT_SOURCE_DIR}/src/client/gen_driver.py ${PROJECT_SOURCE_DIR}/src/client/libcuda.exports
          ${FLYT_CUDA_HOME}/include/cudaTypedefs.h
  COMMENT "Generating the plain driver calls from calls.api"
  VERBATIM)
add_custom_target(calls_generated DEPENDS ${_flyt_calls_outputs})

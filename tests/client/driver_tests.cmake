# Tests of the drop-in libcuda.so.1: include() from tests/client/CMakeLists.txt
# after src/client has included driver_gen.cmake. FLYT_DRIVER_TARGET names the
# library target (default: cuda); its exports are checked when it exists.
if(NOT TARGET driver_generated)
  message(FATAL_ERROR "driver_tests.cmake needs src/client/driver_gen.cmake included first")
endif()
if(NOT DEFINED FLYT_DRIVER_TARGET)
  set(FLYT_DRIVER_TARGET cuda)
endif()

# The cuGetProcAddress lookup over the generated table, linked against the
# generated weak stubs instead of the library.
add_executable(test_procs ${CMAKE_CURRENT_LIST_DIR}/test_procs.c
                          ${CMAKE_CURRENT_LIST_DIR}/test_procs_stubs.c
                          ${PROJECT_SOURCE_DIR}/src/client/procs.c)
add_dependencies(test_procs driver_generated)
target_include_directories(test_procs PRIVATE ${PROJECT_SOURCE_DIR}/src/client
                           ${FLYT_DRIVER_GEN_DIR} ${FLYT_CUDA_HOME}/include)
target_link_libraries(test_procs PRIVATE flyt_test_check)
add_test(NAME driver_procs COMMAND test_procs ${FLYT_DRIVER_EXPORTS})

# soname, no symbol versions, exactly NVIDIA's export list; the refused ones
# exactly as docs/driver-coverage.md lists them.
if(TARGET ${FLYT_DRIVER_TARGET})
  add_test(NAME driver_exports
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/check_driver_exports.sh $<TARGET_FILE:${FLYT_DRIVER_TARGET}>
            ${FLYT_DRIVER_EXPORTS} ${FLYT_CUDA_HOME}/lib64/stubs/libcuda.so
            ${PROJECT_SOURCE_DIR}/docs/driver-coverage.md)
  set_tests_properties(driver_exports PROPERTIES SKIP_RETURN_CODE 77)
endif()

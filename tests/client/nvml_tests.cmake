# Flyt's NVML (src/nvml, target nvidia-ml) over a fake libcuda.so.1: the
# fake sits alone in its own folder, so that neither Flyt's libcuda.so.1 in
# lib/ nor a real one is picked up, and the test finds it through
# LD_LIBRARY_PATH as NVML finds Flyt's libcuda in the VM.
if(TARGET nvidia-ml)
  set(flyt_fake_libcuda_dir ${CMAKE_CURRENT_BINARY_DIR}/fake_libcuda)
  add_library(flyt_fake_libcuda SHARED ${CMAKE_CURRENT_LIST_DIR}/fake_libcuda.c)
  set_target_properties(flyt_fake_libcuda PROPERTIES
    OUTPUT_NAME cuda VERSION 1 SOVERSION 1
    LIBRARY_OUTPUT_DIRECTORY ${flyt_fake_libcuda_dir})
  target_include_directories(flyt_fake_libcuda PRIVATE ${FLYT_CUDA_HOME}/include)

  add_executable(test_nvml ${CMAKE_CURRENT_LIST_DIR}/test_nvml.c)
  target_include_directories(test_nvml PRIVATE ${PROJECT_SOURCE_DIR}/src/nvml)
  target_link_libraries(test_nvml PRIVATE nvidia-ml ${CMAKE_DL_LIBS} flyt_test_check)
  add_dependencies(test_nvml flyt_fake_libcuda) # loaded at run time, by NVML

  add_test(NAME nvml_fake_libcuda
    COMMAND test_nvml ${PROJECT_SOURCE_DIR}/src/nvml/nvml.exports)
  set_tests_properties(nvml_fake_libcuda PROPERTIES
    ENVIRONMENT "LD_LIBRARY_PATH=${flyt_fake_libcuda_dir}"
    TIMEOUT 60)
endif()

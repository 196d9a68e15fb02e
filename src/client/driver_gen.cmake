# The generated parts of the drop-in libcuda.so.1 (gen_driver.py): include()
# from src/client/CMakeLists.txt. Writes into ${CMAKE_CURRENT_BINARY_DIR}:
#   libcuda.map            version script: -Wl,--version-script=...
#   flyt_driver_stubs.inc  weak stubs; compile in a file that has no cuda.h
#   flyt_procs.inc         cuGetProcAddress table; included by procs.c
# and defines the target driver_generated. FLYT_DRIVER_GEN_DIR (cached, so
# tests/client sees it too) names the directory to add to include paths.
find_package(Python3 COMPONENTS Interpreter REQUIRED)

set(FLYT_DRIVER_GEN_DIR ${CMAKE_CURRENT_BINARY_DIR} CACHE INTERNAL "gen_driver.py outputs")
set(FLYT_DRIVER_EXPORTS ${CMAKE_CURRENT_LIST_DIR}/libcuda.exports CACHE INTERNAL "libcuda.so.1 exports")
set(_flyt_driver_typedefs ${FLYT_CUDA_HOME}/include/cudaTypedefs.h
                          ${FLYT_CUDA_HOME}/include/cudaProfilerTypedefs.h)
set(_flyt_driver_outputs ${FLYT_DRIVER_GEN_DIR}/libcuda.map
                         ${FLYT_DRIVER_GEN_DIR}/flyt_driver_stubs.inc
                         ${FLYT_DRIVER_GEN_DIR}/flyt_procs.inc)
set(_flyt_driver_typedef_args)
foreach(h IN LISTS _flyt_driver_typedefs)
  list(APPEND _flyt_driver_typedef_args --typedefs ${h})
endforeach()

add_custom_command(
  OUTPUT ${_flyt_driver_outputs}
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/gen_driver.py
          --exports ${FLYT_DRIVER_EXPORTS} ${_flyt_driver_typedef_args}
          --outdir ${FLYT_DRIVER_GEN_DIR}
  DEPENDS ${CMAKE_CURRENT_LIST_DIR}/gen_driver.py ${FLYT_DRIVER_EXPORTS} ${_flyt_driver_typedefs}
  COMMENT "Generating libcuda.so.1 exports, stubs and cuGetProcAddress table"
  VERBATIM)
add_custom_target(driver_generated DEPENDS ${_flyt_driver_outputs})

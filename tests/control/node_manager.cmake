# flyt-node-manager: its example config and refusals, and the daemon in test mode against a
# real flyt-cluster-manager with real flyt-servers (host backend) and the client test
# program (NVIDIA's runtime) through Flyt's libcuda.so.1.
add_test(NAME control_node_config
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/check_node_config.sh $<TARGET_FILE:flyt-node-manager>
          ${PROJECT_SOURCE_DIR}/configs/node-manager.conf $<TARGET_FILE:flyt-server>)
set_tests_properties(control_node_config PROPERTIES TIMEOUT 30)
if(TARGET flyt-cluster-manager)
  add_executable(test_node test_node.c clm_harness.c)
  target_include_directories(test_node PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${FLYT_CUDA_HOME}/include)
  target_link_libraries(test_node PRIVATE flyt_protocol flyt_control_common)
  add_dependencies(test_node flyt-node-manager flyt-cluster-manager flyt-server cuda test_client_host)
  add_test(NAME control_node_manager
    COMMAND test_node $<TARGET_FILE:flyt-node-manager> $<TARGET_FILE:flyt-cluster-manager>
            $<TARGET_FILE:flyt-server> $<TARGET_FILE:test_client_host> $<TARGET_FILE_DIR:cuda>
            ${FLYT_CUDA_HOME}/lib64)
  set_tests_properties(control_node_manager PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77)
endif()

# Secrets on disk: the store, token files and the state dir private, refused otherwise.
if(TARGET flyt-cluster-manager)
  add_test(NAME control_secrets
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/run_secrets.sh $<TARGET_FILE:flyt-cluster-manager>
            $<TARGET_FILE:flyt-node-manager> $<TARGET_FILE:flyt-server>)
  set_tests_properties(control_secrets PROPERTIES TIMEOUT 60)
endif()

# Locates cuDNN 9's headers (cudnn_graph.h) for the convolutions that run through its graph API. Only the headers: the
# library loads cuDNN at run time and runs those convolutions on its CUTLASS kernel where cuDNN is absent. Looked for in
#   1. -DTIGON_CUDNN_INCLUDE_DIR=... when given;
#   2. the CUDA toolkit's include folders;
#   3. the nvidia-cudnn pip package (PyTorch's CUDA wheels depend on it), asked of the Python interpreter CMake finds.
# Not found: the build goes on without the cuDNN path (a status line says so).
set(TIGON_CUDNN_INCLUDE_DIR "" CACHE PATH "cuDNN 9 include folder (empty: find it)")

if(NOT TIGON_CUDNN_INCLUDE_DIR)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  set(_tigon_cudnn_pip "")
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND "${Python3_EXECUTABLE}" -c "import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], 'include'))"
      OUTPUT_VARIABLE _tigon_cudnn_pip OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
  find_path(_tigon_cudnn_found cudnn_graph.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${_tigon_cudnn_pip} NO_CACHE)
  if(_tigon_cudnn_found)
    set(TIGON_CUDNN_INCLUDE_DIR "${_tigon_cudnn_found}")
  endif()
endif()

if(TIGON_CUDNN_INCLUDE_DIR AND EXISTS "${TIGON_CUDNN_INCLUDE_DIR}/cudnn_graph.h")
  message(STATUS "Tigon: cuDNN headers in ${TIGON_CUDNN_INCLUDE_DIR} (convolutions through cuDNN's graph API when it loads)")
  # one source file uses them: its flags only, so the other files' builds stay as they were
  set_source_files_properties(${PROJECT_SOURCE_DIR}/src/conv2d/conv2d_cudnn.cpp PROPERTIES
    COMPILE_DEFINITIONS TIGON_WITH_CUDNN COMPILE_OPTIONS "-isystem;${TIGON_CUDNN_INCLUDE_DIR}")
  target_link_libraries(tigon PRIVATE ${CMAKE_DL_LIBS})
else()
  message(STATUS "Tigon: no cuDNN 9 headers found: every convolution runs on the CUTLASS kernel")
endif()

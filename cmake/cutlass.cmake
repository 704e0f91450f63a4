# Locates the CUTLASS/CuTe headers (the folder holding cute/ and cutlass/) and sets TIGON_CUTLASS_INCLUDE_DIR:
#   1. the cache variable when given (-DTIGON_CUTLASS_INCLUDE_DIR=...);
#   2. else the headers the pip package nvidia-cutlass installs with its module cutlass_library, asked of the Python
#      interpreter CMake finds;
#   3. else the pinned nvidia-cutlass wheel from PyPI (a zip), checked against its SHA256 and unpacked into the build
#      tree, so a build needs nothing beyond the package index.
set(TIGON_CUTLASS_INCLUDE_DIR "" CACHE PATH "CUTLASS/CuTe include folder (empty: find or download it)")

set(_tigon_cutlass_version 4.2.0.0)
set(_tigon_cutlass_wheel nvidia_cutlass-${_tigon_cutlass_version}-py3-none-any.whl)
set(_tigon_cutlass_url
    "https://files.pythonhosted.org/packages/21/6b/e86fc2fd536dd4b8bd2209aa31d7002610c501b0802337787eac9c9b328c/${_tigon_cutlass_wheel}")
set(_tigon_cutlass_sha256 f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6)

function(_tigon_cutlass_usable dir out)
  # the convolution also takes CUTLASS's utility headers (tools/util/include beside include/, as in its repository)
  if(dir AND EXISTS "${dir}/cute/tensor.hpp" AND EXISTS "${dir}/cutlass/cutlass.h"
     AND EXISTS "${dir}/../tools/util/include/cutlass/util/packed_stride.hpp")
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

if(TIGON_CUTLASS_INCLUDE_DIR)
  _tigon_cutlass_usable("${TIGON_CUTLASS_INCLUDE_DIR}" _ok)
  if(NOT _ok)
    message(FATAL_ERROR "TIGON_CUTLASS_INCLUDE_DIR=${TIGON_CUTLASS_INCLUDE_DIR} holds no cute/tensor.hpp and "
                        "cutlass/cutlass.h, or has no ../tools/util/include beside it")
  endif()
  set(_tigon_cutlass_dir "${TIGON_CUTLASS_INCLUDE_DIR}")
  set(_tigon_cutlass_from "TIGON_CUTLASS_INCLUDE_DIR")
endif()

if(NOT _tigon_cutlass_dir)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND "${Python3_EXECUTABLE}" -c
              "import importlib.util, os; s = importlib.util.find_spec('cutlass_library'); print(os.path.join(list(s.submodule_search_locations)[0], 'source', 'include'))"
      OUTPUT_VARIABLE _dir OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc ERROR_QUIET)
    if(_rc EQUAL 0)
      _tigon_cutlass_usable("${_dir}" _ok)
      if(_ok)
        set(_tigon_cutlass_dir "${_dir}")
        set(_tigon_cutlass_from "the Python package cutlass_library (${Python3_EXECUTABLE})")
      endif()
    endif()
  endif()
endif()

if(NOT _tigon_cutlass_dir)
  set(_root "${CMAKE_BINARY_DIR}/_deps/cutlass-${_tigon_cutlass_version}")
  set(_dir "${_root}/cutlass_library/source/include")
  _tigon_cutlass_usable("${_dir}" _ok)
  if(NOT _ok)
    message(STATUS "Tigon: downloading ${_tigon_cutlass_wheel} (CUTLASS/CuTe headers)")
    file(DOWNLOAD "${_tigon_cutlass_url}" "${_root}/${_tigon_cutlass_wheel}"
         EXPECTED_HASH SHA256=${_tigon_cutlass_sha256} STATUS _status TLS_VERIFY ON)
    list(GET _status 0 _code)
    if(NOT _code EQUAL 0)
      message(FATAL_ERROR "Could not download ${_tigon_cutlass_url}: ${_status}. Install the headers with "
                          "'pip install nvidia-cutlass==${_tigon_cutlass_version}' or pass -DTIGON_CUTLASS_INCLUDE_DIR.")
    endif()
    file(ARCHIVE_EXTRACT INPUT "${_root}/${_tigon_cutlass_wheel}" DESTINATION "${_root}"
         PATTERNS "cutlass_library/source/include/*" "cutlass_library/source/tools/util/include/*")
    file(REMOVE "${_root}/${_tigon_cutlass_wheel}")
  endif()
  set(_tigon_cutlass_dir "${_dir}")
  set(_tigon_cutlass_from "the ${_tigon_cutlass_wheel} wheel from PyPI")
endif()

# A plain variable: the cache keeps what the user gave, so a later configure searches again.
set(TIGON_CUTLASS_INCLUDE_DIR "${_tigon_cutlass_dir}")
get_filename_component(TIGON_CUTLASS_UTIL_INCLUDE_DIR "${_tigon_cutlass_dir}/../tools/util/include" ABSOLUTE)
message(STATUS "Tigon: CUTLASS headers from ${_tigon_cutlass_from}: ${TIGON_CUTLASS_INCLUDE_DIR}")

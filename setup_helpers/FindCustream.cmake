# FindCustream.cmake: locate the installed custream's C header (custream.h).
#
#   list(APPEND CMAKE_MODULE_PATH "/path/to/this/folder")
#   find_package(Python REQUIRED COMPONENTS Interpreter Development.Module)
#   find_package(Custream REQUIRED)
#   Python_add_library(mymod MODULE WITH_SOABI mymod.c)
#   target_link_libraries(mymod PRIVATE Custream::Custream)
#
# Asks the Python interpreter of the build (Python_EXECUTABLE, else Python3_EXECUTABLE,
# else the first python3 found) for custream.get_include(), so it finds the custream
# installed where the module will run. Header-only: the module imports custream's C API
# at run time (custream_import()), nothing is linked.
#
# Sets Custream_FOUND, Custream_INCLUDE_DIR, Custream_VERSION, Custream_ABI_VERSION and
# the INTERFACE target Custream::Custream.

if(Python_EXECUTABLE)
  set(_custream_python "${Python_EXECUTABLE}")
elseif(Python3_EXECUTABLE)
  set(_custream_python "${Python3_EXECUTABLE}")
else()
  find_package(Python3 QUIET COMPONENTS Interpreter)
  set(_custream_python "${Python3_EXECUTABLE}")
endif()

if(_custream_python)
  execute_process(
    COMMAND "${_custream_python}" -c
            "import custream; print(custream.get_include()); print(custream.__version__); print(custream.ABI_VERSION)"
    OUTPUT_VARIABLE _custream_out
    ERROR_VARIABLE _custream_err
    RESULT_VARIABLE _custream_rc
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_custream_rc EQUAL 0)
    string(REPLACE "\n" ";" _custream_out "${_custream_out}")
    list(GET _custream_out 0 _custream_include)
    list(GET _custream_out 1 Custream_VERSION)
    list(GET _custream_out 2 Custream_ABI_VERSION)
    # A cache entry, so a user can point it elsewhere with -DCustream_INCLUDE_DIR=...
    set(Custream_INCLUDE_DIR "${_custream_include}" CACHE PATH "Folder holding custream.h")
  elseif(NOT Custream_FIND_QUIETLY)
    message(STATUS "custream is not importable by ${_custream_python}: ${_custream_err}")
  endif()
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Custream
  REQUIRED_VARS Custream_INCLUDE_DIR
  VERSION_VAR Custream_VERSION)

if(Custream_FOUND AND NOT TARGET Custream::Custream)
  add_library(Custream::Custream INTERFACE IMPORTED)
  set_target_properties(Custream::Custream PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${Custream_INCLUDE_DIR}")
endif()

unset(_custream_python)
unset(_custream_out)
unset(_custream_err)
unset(_custream_rc)
unset(_custream_include)

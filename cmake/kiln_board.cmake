# Turns a board description (boards/<name>/board.toml) into a firmware build.
#
#   kiln_board_generate(<board> [STACK_SIZE <bytes>])      before project()
#     STACK_SIZE overrides the board's main stack (board.toml's stack_size).
#     Generates board.ld, kiln_board.h and board.cmake into the build tree with
#     `python -m kiln.boards` (which validates the description) and, unless the
#     build was given one, makes the board's toolchain (cpu.toolchain:
#     cmake/<toolchain>.cmake) CMAKE_TOOLCHAIN_FILE. Sets KILN_BOARD_NAME, KILN_BOARD_CPU,
#     KILN_BOARD_COMPILE_FLAGS, KILN_BOARD_LINK_FLAGS, KILN_BOARD_TOOLCHAIN(_FILE),
#     KILN_BOARD_UART_DRIVER (the platform's UART source for uart.kind),
#     KILN_BOARD_LINKER_SCRIPT, KILN_BOARD_INCLUDE_DIR.
#
#   kiln_board_configure()                                after project()
#     Checks that the toolchain in use is the board's and accepts the board's CPU
#     flags, and applies the compile and link flags to every target in the calling
#     directory (with clang, also the C/C++ libraries' header folders).
#
#   kiln_add_firmware(<name> SOURCES <src>... [LIBRARIES <lib>...])
#     An ELF linked with the board's linker script and kiln's platform layer;
#     writes <name>.map, prints the section sizes and fails the build if the
#     heap (malloc, operator new, _sbrk) was linked in.

# KILN_ROOT holds boards/, firmware/ and cmake/: the repository root in a checkout,
# kiln/_share/ in an installed kiln package (kiln.paths.SOURCE_ROOT).
get_filename_component(KILN_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

# KILN_PYTHON: a Python that imports kiln. kiln passes its own (sys.executable);
# by hand in a checkout, the checkout's .venv.
if(NOT KILN_PYTHON)
  if(EXISTS "${KILN_ROOT}/.venv/bin/python")
    set(KILN_PYTHON "${KILN_ROOT}/.venv/bin/python" CACHE FILEPATH "kiln's Python")
  else()
    message(FATAL_ERROR "kiln: no Python with kiln: pass -DKILN_PYTHON=<python>, or in a "
                        "checkout run ./scripts/setup.sh (it makes .venv).")
  endif()
endif()
# The generator of the board files, the package kiln.boards: compiler/kiln/boards/ in a
# checkout, kiln/boards/ beside kiln/_share/ in an installed package. A configure depends
# on each of its modules.
if(EXISTS "${KILN_ROOT}/compiler/kiln/boards/__init__.py")
  set(_kb_package "${KILN_ROOT}/compiler/kiln/boards")
else()
  get_filename_component(_kb_package "${KILN_ROOT}/../boards" ABSOLUTE)
endif()
file(GLOB KILN_BOARD_GENERATOR "${_kb_package}/*.py")

macro(kiln_board_generate board)
  cmake_parse_arguments(_kb "" "STACK_SIZE" "" ${ARGN})
  set(_kb_stack)
  if(_kb_STACK_SIZE)
    set(_kb_stack --stack-size "${_kb_STACK_SIZE}")
  endif()
  set(_kb_out "${CMAKE_BINARY_DIR}/kiln-board")
  execute_process(
    COMMAND "${KILN_PYTHON}" -m kiln.boards generate --board "${board}"
            --out "${_kb_out}" ${_kb_stack}
    RESULT_VARIABLE _kb_rc ERROR_VARIABLE _kb_err)
  if(NOT _kb_rc EQUAL 0)
    string(STRIP "${_kb_err}" _kb_err)
    message(FATAL_ERROR "${_kb_err}")
  endif()
  include("${_kb_out}/board.cmake")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
    "${KILN_BOARD_DESCRIPTION}" "${KILN_BOARD_GENERATOR}")
  if(NOT CMAKE_TOOLCHAIN_FILE)
    set(CMAKE_TOOLCHAIN_FILE "${KILN_BOARD_TOOLCHAIN_FILE}")
  endif()
endmacro()

include(CheckCCompilerFlag)

macro(kiln_board_configure)
  if(NOT KILN_TOOLCHAIN STREQUAL KILN_BOARD_TOOLCHAIN)
    message(FATAL_ERROR
      "kiln: board ${KILN_BOARD_NAME} is built with toolchain ${KILN_BOARD_TOOLCHAIN} (board.toml's "
      "cpu.toolchain), but this build directory uses ${CMAKE_TOOLCHAIN_FILE}; configure a new build "
      "directory with -DCMAKE_TOOLCHAIN_FILE=${KILN_BOARD_TOOLCHAIN_FILE}, or without the option.")
  endif()
  string(REPLACE ";" " " _kb_flags "${KILN_BOARD_COMPILE_FLAGS}")
  set(CMAKE_REQUIRED_FLAGS "${_kb_flags}")
  string(MAKE_C_IDENTIFIER "KILN_CPU_FLAGS_OK_${KILN_BOARD_CPU}" _kb_var)
  check_c_compiler_flag("" ${_kb_var})
  unset(CMAKE_REQUIRED_FLAGS)
  if(NOT ${_kb_var})
    message(FATAL_ERROR
      "kiln: ${CMAKE_C_COMPILER} (version ${CMAKE_C_COMPILER_VERSION}) does not accept "
      "board ${KILN_BOARD_NAME}'s CPU flags '${_kb_flags}'. ${KILN_BOARD_CPU} needs a compiler "
      "that knows it: set cpu.toolchain in board.toml (clang-arm-none-eabi builds a Cortex-M85).")
  endif()

  set(CMAKE_EXECUTABLE_SUFFIX_C ".elf")
  set(CMAKE_EXECUTABLE_SUFFIX_CXX ".elf")
  add_compile_options(${KILN_BOARD_COMPILE_FLAGS})
  add_link_options(${KILN_BOARD_LINK_FLAGS})
  include_directories("${KILN_BOARD_INCLUDE_DIR}")
  if(KILN_TOOLCHAIN STREQUAL "clang-arm-none-eabi")
    _kiln_library_headers()
  endif()
endmacro()

# clang compiles against arm-none-eabi-gcc's newlib and libstdc++: their header folders,
# in GCC's own order, for the multilib the board links (KILN_BOARD_LINK_FLAGS); GCC's
# private folders (its stddef.h, arm_mve.h, ...) are left out: clang has its own.
function(_kiln_library_headers)
  execute_process(COMMAND "${KILN_ARM_GCC}" ${KILN_BOARD_LINK_FLAGS} -xc++ -E -Wp,-v -
    INPUT_FILE /dev/null OUTPUT_QUIET ERROR_VARIABLE _kh_out RESULT_VARIABLE _kh_rc)
  string(REGEX MATCH "#include <...> search starts here:\n(.*)\nEnd of search list" _kh_list "${_kh_out}")
  if(NOT _kh_rc EQUAL 0 OR NOT CMAKE_MATCH_1)
    message(FATAL_ERROR "kiln: ${KILN_ARM_GCC} did not list its header folders for "
                        "'${KILN_BOARD_LINK_FLAGS}'; run ./scripts/setup.sh (newlib, libstdc++)")
  endif()
  string(REGEX REPLACE "\n" ";" _kh_dirs "${CMAKE_MATCH_1}")
  foreach(_kh_dir IN LISTS _kh_dirs)
    string(STRIP "${_kh_dir}" _kh_dir)
    get_filename_component(_kh_dir "${_kh_dir}" ABSOLUTE)
    if(_kh_dir MATCHES "/gcc/arm-none-eabi/[^/]+/include(-fixed)?$")
      continue()
    endif()
    if(_kh_dir MATCHES "/c\\+\\+/")
      add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-isystem${_kh_dir}>")
    else()
      add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-isystem${_kh_dir}>")
    endif()
  endforeach()
endfunction()

function(kiln_add_firmware name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBRARIES" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBRARIES} kiln_platform)
  target_link_options(${name} PRIVATE
    "-T${KILN_BOARD_LINKER_SCRIPT}"
    "-Wl,-Map=$<TARGET_FILE_DIR:${name}>/${name}.map")
  set_property(TARGET ${name} APPEND PROPERTY LINK_DEPENDS "${KILN_BOARD_LINKER_SCRIPT}")
  add_custom_command(TARGET ${name} POST_BUILD
    COMMAND "${CMAKE_COMMAND}" -DNM=${CMAKE_NM} -DELF=$<TARGET_FILE:${name}>
            -P "${KILN_ROOT}/cmake/check_no_heap.cmake"
    COMMAND "${CMAKE_SIZE}" -A -x $<TARGET_FILE:${name}>
    VERBATIM)
endfunction()

# A program made into what firmware links: its kernel table and its bytes. Included by
# firmware/runtime/CMakeLists.txt and by the installed package (kilnConfig.cmake).
#
#   kiln_kernel_table(<target> [ALL] [PTE <file>...] [OPERATORS <name.overload>...])
#     Makes static library <target> holding kiln::runtime::kKernelTable with exactly the
#     kernels the programs (PTE) or names (OPERATORS) need, ALL for every kernel (linking
#     kiln::kernels). The table is generated at build time by gen_kernel_table.py, run by
#     KILN_PYTHON (a Python that imports kiln); an operator the runtime lacks fails the build
#     with a message naming it.
#
#   kiln_add_pte(<target> PTE <file> [SYMBOL <name>] [SECTION <section>])
#     Makes static library <target> holding the .pte's bytes for Program::load:
#       extern "C" const uint8_t <name>[];      // the first byte, 128-byte aligned
#       extern "C" const uint8_t <name>_end[];  // one past the last
#     <name> defaults to kiln_pte; <section> (default .rodata.<name>) is where the linker
#     script places it (kiln's board scripts place .<region>.data.* in that board region).
#     16 bytes of padding follow the end: the NPU may read a word past the weights' end. The
#     library is rebuilt when the .pte changes.

# (Internal cache entries: the functions read them from any directory of the build.)
if(EXISTS "${CMAKE_CURRENT_LIST_DIR}/gen_kernel_table.py")  # the installed package
  set(_km_script "${CMAKE_CURRENT_LIST_DIR}/gen_kernel_table.py")
else()  # a checkout, or kiln/_share/ of an installed kiln
  get_filename_component(_km_script "${CMAKE_CURRENT_LIST_DIR}/../firmware/runtime/gen_kernel_table.py" ABSOLUTE)
endif()
set(KILN_KERNEL_TABLE_SCRIPT "${_km_script}" CACHE INTERNAL "gen_kernel_table.py")
set(KILN_MODEL_CMAKE_DIR "${CMAKE_CURRENT_LIST_DIR}" CACHE INTERNAL "cmake/kiln_model.cmake's folder")

function(kiln_kernel_table target)
  cmake_parse_arguments(K "ALL" "" "PTE;OPERATORS" ${ARGN})
  set(out "${CMAKE_CURRENT_BINARY_DIR}/${target}.cpp")
  set(args --output "${out}")
  if(K_ALL)
    list(APPEND args --all)
  endif()
  foreach(pte IN LISTS K_PTE)
    list(APPEND args --pte "${pte}")
  endforeach()
  list(APPEND args ${K_OPERATORS})
  add_custom_command(OUTPUT "${out}"
    COMMAND ${KILN_PYTHON} "${KILN_KERNEL_TABLE_SCRIPT}" ${args}
    DEPENDS "${KILN_KERNEL_TABLE_SCRIPT}" ${K_PTE}
    COMMENT "kiln: kernel table ${target}"
    VERBATIM)
  add_library(${target} STATIC "${out}")
  target_link_libraries(${target} PUBLIC kiln::kernels)
endfunction()

function(kiln_add_pte target)
  cmake_parse_arguments(P "" "PTE;SYMBOL;SECTION" "" ${ARGN})
  if(NOT P_PTE)
    message(FATAL_ERROR "kiln_add_pte(${target}): PTE <file> is required")
  endif()
  get_filename_component(KILN_PTE_FILE "${P_PTE}" ABSOLUTE)
  set(KILN_PTE_SYMBOL kiln_pte)
  if(P_SYMBOL)
    set(KILN_PTE_SYMBOL "${P_SYMBOL}")
  endif()
  if(NOT KILN_PTE_SYMBOL MATCHES "^[A-Za-z_][A-Za-z0-9_]*$")
    message(FATAL_ERROR "kiln_add_pte(${target}): SYMBOL '${KILN_PTE_SYMBOL}' is not a C identifier")
  endif()
  set(KILN_PTE_SECTION ".rodata.${KILN_PTE_SYMBOL}")
  if(P_SECTION)
    set(KILN_PTE_SECTION "${P_SECTION}")
  endif()
  set(out "${CMAKE_CURRENT_BINARY_DIR}/${target}.S")
  configure_file("${KILN_MODEL_CMAKE_DIR}/kiln_pte.S.in" "${out}" @ONLY)
  add_library(${target} STATIC "${out}")
  set_property(SOURCE "${out}" APPEND PROPERTY OBJECT_DEPENDS "${KILN_PTE_FILE}")
endfunction()

# cmake -DNM=<arm-none-eabi-nm> -DELF=<file> -P check_no_heap.cmake
# Fails when the ELF defines a heap allocator: kiln's firmware allocates nothing
# at run time, so malloc, operator new or _sbrk being linked in is a build error.
execute_process(COMMAND "${NM}" --defined-only "${ELF}"
  OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kiln: ${NM} could not read ${ELF}")
endif()
foreach(symbol malloc _malloc_r calloc realloc free _sbrk _sbrk_r _Znwj _Znaj _ZdlPv _ZdaPv)
  if(symbols MATCHES "[ \n][TtWw] ${symbol}\n")
    message(FATAL_ERROR
      "kiln: ${ELF} links the heap allocator (${symbol}); kiln's firmware must not "
      "allocate at run time. The map file beside the ELF shows which object pulled it in.")
  endif()
endforeach()

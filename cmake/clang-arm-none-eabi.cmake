# CMake toolchain file: bare-metal Arm (Cortex-M) with Debian's clang 19, for CPUs that
# Debian's arm-none-eabi-gcc 12 does not know (Cortex-M85). clang compiles; the C and C++
# libraries are Debian's arm-none-eabi newlib and libstdc++, and arm-none-eabi-gcc links,
# choosing their multilib from the board's cpu.link_flags. kiln_board.cmake adds the
# libraries' header folders (they depend on that multilib); CPU flags come from the board.
set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_SYSTEM_PROCESSOR arm)
set(KILN_TOOLCHAIN clang-arm-none-eabi)

find_program(KILN_CLANG NAMES clang-19)
find_program(KILN_CLANGXX NAMES clang++-19)
find_program(KILN_ARM_GCC arm-none-eabi-gcc)
if(NOT KILN_CLANG OR NOT KILN_CLANGXX OR NOT KILN_ARM_GCC)
  message(FATAL_ERROR
    "kiln: this board is built with clang-19 and linked with arm-none-eabi-gcc, and one is "
    "not installed. Run ./scripts/setup.sh (it installs Debian's clang-19 and gcc-arm-none-eabi).")
endif()
get_filename_component(_kiln_gcc_dir "${KILN_ARM_GCC}" DIRECTORY)

set(CMAKE_C_COMPILER "${KILN_CLANG}")
set(CMAKE_CXX_COMPILER "${KILN_CLANGXX}")
set(CMAKE_ASM_COMPILER "${KILN_CLANG}")
foreach(lang C CXX ASM)
  set(CMAKE_${lang}_COMPILER_TARGET arm-none-eabi)
endforeach()
set(CMAKE_AR "${_kiln_gcc_dir}/arm-none-eabi-ar" CACHE FILEPATH "")
set(CMAKE_RANLIB "${_kiln_gcc_dir}/arm-none-eabi-ranlib" CACHE FILEPATH "")
set(CMAKE_OBJCOPY "${_kiln_gcc_dir}/arm-none-eabi-objcopy" CACHE FILEPATH "")
set(CMAKE_SIZE "${_kiln_gcc_dir}/arm-none-eabi-size" CACHE FILEPATH "")
set(CMAKE_NM "${_kiln_gcc_dir}/arm-none-eabi-nm" CACHE FILEPATH "")

# GCC's ABI for arm-none-eabi: enums take the smallest integer type that holds them
# (Tag_ABI_enum_size small), as newlib and libstdc++ were built; clang's default differs.
set(CMAKE_C_FLAGS_INIT "-fshort-enums")
set(CMAKE_CXX_FLAGS_INIT "-fshort-enums")

# arm-none-eabi-gcc links: it knows where its libraries and start files are. Compile
# flags (clang's --target, the M85's -mcpu) stay off its command line; the link
# options (the board's link_flags, the linker script) are on it.
set(KILN_LINKER_DRIVER "${_kiln_gcc_dir}/arm-none-eabi-g++")
# clang marks its objects' stacks non-executable (.note.GNU-stack) and newlib's are unmarked,
# which ld warns about; a Cortex-M has no such thing as an executable stack: say so.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,-z,noexecstack")
foreach(lang C CXX)
  set(CMAKE_${lang}_LINK_EXECUTABLE
      "${KILN_LINKER_DRIVER} <CMAKE_${lang}_LINK_FLAGS> <LINK_FLAGS> <OBJECTS> -o <TARGET> <LINK_LIBRARIES>")
endforeach()

# The compiler checks cannot link without a board's linker script.
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)

set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)

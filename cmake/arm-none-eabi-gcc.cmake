# CMake toolchain file: bare-metal Arm (Cortex-M) with Debian's arm-none-eabi-gcc.
# CPU flags come from the board description (see kiln_board.cmake), not from here.
set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_SYSTEM_PROCESSOR arm)
set(KILN_TOOLCHAIN arm-none-eabi-gcc)

find_program(KILN_ARM_GCC arm-none-eabi-gcc)
if(NOT KILN_ARM_GCC)
  message(FATAL_ERROR
    "kiln: arm-none-eabi-gcc is not installed. Run ./scripts/setup.sh "
    "(it installs Debian's gcc-arm-none-eabi and newlib).")
endif()
get_filename_component(_kiln_gcc_dir "${KILN_ARM_GCC}" DIRECTORY)

set(CMAKE_C_COMPILER "${_kiln_gcc_dir}/arm-none-eabi-gcc")
set(CMAKE_CXX_COMPILER "${_kiln_gcc_dir}/arm-none-eabi-g++")
set(CMAKE_ASM_COMPILER "${_kiln_gcc_dir}/arm-none-eabi-gcc")
set(CMAKE_OBJCOPY "${_kiln_gcc_dir}/arm-none-eabi-objcopy" CACHE FILEPATH "")
set(CMAKE_SIZE "${_kiln_gcc_dir}/arm-none-eabi-size" CACHE FILEPATH "")
set(CMAKE_NM "${_kiln_gcc_dir}/arm-none-eabi-nm" CACHE FILEPATH "")

# The compiler checks cannot link without a board's linker script.
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)

set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)

# tfaot.cmake - add a TensorFlow/Keras model to a CMake build with one call.
#
#   include(/path/to/tfaot.cmake)         # path: `tfaot cmake-path`
#   tfaot_add_model(<target> MODEL <file> [NAME <c-prefix>] [TRIPLE <triple>]
#                   [CPU <cpu>] [FROM_SOURCE] [BUILD_ARGS <args>...])
#   target_link_libraries(app PRIVATE <target>)
#
# At build time (not configure time) this runs `tfaot build` on <file> into
# ${CMAKE_CURRENT_BINARY_DIR}/tfaot/<name> and defines the library <target>:
# by default the prebuilt lib<name>.a that tfaot made (for TRIPLE, with the
# compiler tfaot finds for it); with FROM_SOURCE, the generated sources
# (src/<name>.c + src/<name>_kernels.o) compiled by this project's own C
# compiler and flags, e.g. a firmware toolchain.  <name> defaults to the
# model file's stem as a C identifier (as `tfaot build`).  The tfaot command
# is TFAOT_EXECUTABLE (cache variable; found on PATH by default).
cmake_minimum_required(VERSION 3.19)  # add_dependencies on INTERFACE libraries

find_program(TFAOT_EXECUTABLE tfaot DOC "The tfaot command line")

# The runtime shim that `tfaot build` writes next to src/<name>.c, which
# includes it (core + CPU backend + the generated status header): byproducts
# of the build command.  Must list compiler/package/shim.py's SHIM_FILES and
# SHIM_STATUS_HEADER (tests/test_cmake.py checks it).
set(TFAOT_SHIM_FILES tfrt.h tfrt_backend.h tfrt_core.c tfrt_cpu.h tfrt_cpu.c tfrt_abi.h
    tfrt_status.h)

# The model file's name as `tfaot build` makes it a C prefix without --name
# (compiler/names.py default_name): "kws-v2.keras" -> kws_v2, "9lives.h5" ->
# m_9lives, tfrt* and system libraries' names (m, c, ...) get "m_" too.
function(_tfaot_default_name model out_var)
  get_filename_component(name "${model}" NAME)
  string(REGEX REPLACE "\\..*$" "" name "${name}")
  string(REGEX REPLACE "[^A-Za-z0-9_]" "_" name "${name}")
  string(TOLOWER "${name}" lower)
  if(name STREQUAL "")
    set(name model)
  endif()
  # (names.py: SYSTEM_LIBRARIES, then STANDARD_HEADERS)
  if(name MATCHES "^[0-9]" OR lower MATCHES "^tfrt" OR name MATCHES
     "^(c|m|dl|rt|pthread|atomic|gcc|gcc_s|nosys|rdimon)$" OR name MATCHES
     "^(assert|complex|ctype|errno|fenv|float|inttypes|iso646|limits|locale|math|setjmp|signal|stdalign|stdarg|stdatomic|stdbool|stddef|stdint|stdio|stdlib|stdnoreturn|string|tgmath|threads|time|uchar|wchar|wctype|unistd|pthread|dlfcn|fcntl|strings|alloca|malloc|immintrin|arm_neon|arm_mve|arm_acle)$")
    set(name "m_${name}")
  endif()
  string(SUBSTRING "${name}" 0 63 name)
  set(${out_var} "${name}" PARENT_SCOPE)
endfunction()

function(tfaot_add_model target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "FROM_SOURCE" "MODEL;NAME;TRIPLE;CPU" "BUILD_ARGS")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "tfaot_add_model(${target}): unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_MODEL)
    message(FATAL_ERROR "tfaot_add_model(${target}): MODEL <file> is required")
  endif()
  if(NOT TFAOT_EXECUTABLE)
    message(FATAL_ERROR "tfaot_add_model(${target}): the tfaot command was not found; "
                        "install tfaot or set TFAOT_EXECUTABLE")
  endif()
  get_filename_component(model "${ARG_MODEL}" ABSOLUTE)
  if(NOT EXISTS "${model}")
    message(FATAL_ERROR "tfaot_add_model(${target}): model ${model} does not exist")
  endif()
  set(name "${ARG_NAME}")
  if(NOT name)
    _tfaot_default_name("${model}" name)
  endif()

  # One C name per program: two models of one name define the same symbols
  # (and in one folder, the same build rule)
  get_property(owner GLOBAL PROPERTY "TFAOT_NAME_${name}")
  if(owner)
    message(FATAL_ERROR "tfaot_add_model(${target}): the C name '${name}' (from ${ARG_MODEL}) "
                        "is taken by tfaot_add_model(${owner}); give this one NAME <another>")
  endif()
  set_property(GLOBAL PROPERTY "TFAOT_NAME_${name}" "${target}")

  if(CMAKE_CROSSCOMPILING AND NOT ARG_TRIPLE)
    # (tfaot would build for the machine it runs on: the project's compiler
    # then fails on a context size or kernel object that is not its target's)
    message(FATAL_ERROR "tfaot_add_model(${target}): this project cross-compiles "
                        "(CMAKE_SYSTEM_NAME ${CMAKE_SYSTEM_NAME}); give the model's TRIPLE "
                        "(and CPU), e.g. TRIPLE thumbv7em-none-eabihf CPU cortex-m4")
  endif()

  set(out "${CMAKE_CURRENT_BINARY_DIR}/tfaot/${name}")
  # --force: the folder is this function's own, but holds what the generator
  # made there (src/, created for the outputs) besides tfaot's files.
  set(args -q build "${model}" -o "${out}" --force --name "${name}")
  if(ARG_TRIPLE)
    list(APPEND args --triple "${ARG_TRIPLE}")
  endif()
  if(ARG_CPU)
    list(APPEND args --cpu "${ARG_CPU}")
  endif()
  set(lib "${out}/lib${name}.a")
  set(sources "${out}/src/${name}.c" "${out}/src/${name}_kernels.o")
  # A model folder is a directory: depend on its files so edits rebuild.
  set(deps "${model}")
  if(IS_DIRECTORY "${model}")
    file(GLOB_RECURSE deps CONFIGURE_DEPENDS "${model}/*")
  endif()
  set(outputs "${out}/${name}.h" ${sources})
  set(shim "")
  foreach(f IN LISTS TFAOT_SHIM_FILES)
    list(APPEND shim "${out}/src/${f}")
  endforeach()
  if(NOT ARG_FROM_SOURCE)
    list(APPEND outputs "${lib}")
  endif()
  add_custom_command(
    OUTPUT ${outputs}
    BYPRODUCTS ${shim}
    COMMAND "${TFAOT_EXECUTABLE}" ${args} ${ARG_BUILD_ARGS}
    DEPENDS ${deps}
    COMMENT "tfaot: building model ${name} from ${ARG_MODEL}"
    VERBATIM)
  add_custom_target(${target}_tfaot_build DEPENDS ${outputs})
  file(MAKE_DIRECTORY "${out}/src")

  if(ARG_FROM_SOURCE)
    add_library(${target} STATIC ${sources})
    set_source_files_properties(${sources} PROPERTIES GENERATED TRUE)
    set_target_properties(${target} PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON)
    set(scope PUBLIC)
    target_include_directories(${target} PUBLIC "${out}/src")
  else()
    add_library(${target} INTERFACE)
    set(scope INTERFACE)
    target_include_directories(${target} INTERFACE "${out}")
    target_link_libraries(${target} INTERFACE "${lib}")
  endif()
  add_dependencies(${target} ${target}_tfaot_build)
  # Kernels call floorf/fmaf (libm); the soft-double helpers come with libgcc.
  target_link_libraries(${target} ${scope} m)
  set_property(TARGET ${target} PROPERTY TFAOT_OUTPUT_DIR "${out}")
endfunction()

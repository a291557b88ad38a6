/* A stand-in kernel object that only speaks ABI version 7: init of a model
 * linked with it must fail with status 4 (ABI mismatch), not crash. */
#include "tfrt_abi.h"

static const tfrt_abi_library_header header = {7u, "fake", 0u, 0};
static const struct { const tfrt_abi_library_header *header; } library = {&header};

const void *QUERY(uint32_t max_version, const tfrt_abi_environment *environment) {
  (void)environment;
  return max_version == 7u ? (const void *)&library : NULL;
}

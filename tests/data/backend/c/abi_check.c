/* Asks a kernel object for its executable-library ABI.  Built with
 * -DQUERY=<NAME>_kernels_library_query and linked with <NAME>_kernels.o.
 * Prints "version=<v>" and exits 0 only if the object speaks exactly the
 * version runtime_shim declares (TFRT_ABI_VERSION). */
#include <stdio.h>

#include "tfrt_abi.h"

const void *QUERY(uint32_t max_version, const tfrt_abi_environment *environment);

int main(void) {
  static const tfrt_abi_environment env;
  const tfrt_abi_library_v6 *lib = (const tfrt_abi_library_v6 *)QUERY(TFRT_ABI_VERSION, &env);
  if (!lib) {
    for (uint32_t v = 0; v < 64; ++v) {
      const tfrt_abi_library_header *const *h = (const tfrt_abi_library_header *const *)QUERY(v, &env);
      if (h) {
        printf("version=%u\n", (*h)->version);
        return 1;
      }
    }
    printf("version=none\n");
    return 1;
  }
  printf("version=%u name=%s exports=%u imports=%u\n", lib->header->version, lib->header->name,
         lib->exports.count, lib->imports.count);
  for (uint32_t i = 0; i < lib->exports.count; ++i) printf("export %s\n", lib->exports.names[i]);
  if (QUERY(TFRT_ABI_VERSION - 1, &env) || QUERY(TFRT_ABI_VERSION + 1, &env)) {
    printf("object also answers other versions\n");
    return 1;
  }
  return lib->header->version == TFRT_ABI_VERSION ? 0 : 1;
}
